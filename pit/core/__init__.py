"""The paper's math, torch only (no files, no CLI, no `transformers`): `linalg` (Gram, SVD, polar, pinv,
inverse square root, Stiefel init), `interfaces` (PIT, TT, untied), `loss` (the chunked fused head + loss)
and `metrics` (Delta_TI, anchor agreement, direct path). Nothing here imports `pit` beyond `pit.errors`."""

from pit.core.interfaces import InterfaceConfig, PITTying, TokenInterface, TransposeTying, UntiedHead, make_interface

__all__ = ["InterfaceConfig", "PITTying", "TokenInterface", "TransposeTying", "UntiedHead", "make_interface"]
