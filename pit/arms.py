"""The arms of a profile: an arm's name is its interface kind, optionally followed by `-<variant>` (pit-head,
tt-norewarm, pit-lr10); and which tokenizer a slot's runs read. The workflow (pit/pipeline), the report and the
tags share these rules."""

from __future__ import annotations


def arm_kind(arm: str) -> str:
    """The interface kind of an arm: its name up to the first '-' (pit-head -> pit, tt-norewarm -> tt)."""
    return arm.split("-", 1)[0]


def mode_arms(interfaces: list[str], entries: dict) -> list[str]:
    """The arms of a mode's slots in their order: each of `interfaces`, then right after it the mode's extra arms
    (entries of `<mode>_arms` not named like an interface) of its kind."""
    extra = [a for a in entries if a not in interfaces]
    return [a for i in interfaces for a in [i, *(x for x in extra if arm_kind(x) == i)]]


def slot_tokenizer(pretrain: dict, mode: str, slot: str | None) -> str:
    """The tokenizer a slot's runs read (`pretrain` = the profile's `pretrain` key): a teacher slot's own where it
    names one (two real teachers of different families), else its mode's (`pretrain.tokenizer.<mode>`)."""
    own = pretrain["teacher_slots"].get(slot, {}).get("tokenizer") if mode == "teacher" else None
    return own or pretrain["tokenizer"][mode]
