"""`pit teacher materialize` on GGUF files that are not whole models (issue 65, items 7 and 18;
pit/models/gguf_checks.py): each is refused in one line naming what is wrong, exit 2, nothing written, before any
weight is allocated; the files are the tiny GGUF of tests/helpers.py written again with the `gguf` package, with
tensors left out, fields of other types or values, non-finite weights, or cut and patched bytes."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest
from helpers import write_tiny_gguf

from pit.commands import main

V = gguf.GGUFValueType


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def rewrite(src, dst, drop=(), fields=None, values=None):
    """The GGUF file `src` written again to `dst` (byte for byte without changes): the tensors whose names start
    with one of `drop` left out, each field of `fields` ({key: (value, type, array type) or None to leave it out})
    replaced, and each tensor's data passed through `values(name, array)` when given."""
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(str(dst), reader.fields["general.architecture"].contents())
    fields = fields or {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or fields.get(key, ()) is None:
            continue
        kind = field.types[0]
        value = (field.contents(), kind, field.types[-1] if kind == V.ARRAY else None)
        writer.add_key_value(key, *fields.get(key, value))
    for t in reader.tensors:
        if not any(t.name.startswith(d) for d in drop):
            data = np.array(t.data) if values is None else values(t.name, np.array(t.data))
            writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def refused(path, tmp_path, capsys) -> str:
    """`pit teacher materialize PATH`: exit 2 with one line (returned; after transformers' progress bar when the
    weights were loaded), and no teacher folder."""
    capsys.readouterr()
    assert main(["teacher", "materialize", str(path), "--out", str(tmp_path / "t")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    err = [line for line in lines if not line.startswith("Converting and de-quantizing GGUF tensors")]  # progress
    assert len(err) == 1 and "\r" not in "".join(lines), lines  # (plain progress lines when stderr is no terminal)
    assert err[-1].startswith("pit teacher: error: "), err
    assert not (tmp_path / "t").exists()
    return err[-1]


def test_the_rewrite_is_byte_for_byte(tiny, tmp_path):
    assert rewrite(tiny, tmp_path / "same.gguf").read_bytes() == tiny.read_bytes()


@pytest.mark.parametrize(
    "drop, named",
    [
        (("blk.0.attn_q.weight",), "lacks the tensors blk.0.attn_q.weight;"),  # one attention weight
        (("output_norm.weight",), "lacks the tensors output_norm.weight;"),
        (("token_embd", "blk.0.attn_q", "blk.0.ffn_down"), "token_embd.weight, blk.0.attn_q.weight, blk.0.ffn_dow"),
        (("blk.0.",), "lacks every tensor of block 0 (blk.0.*)"),  # a whole block
        (("",), "lacks every tensor of block 0 (blk.0.*)"),  # all of them
    ],
)
def test_a_gguf_that_lacks_tensors_is_refused_naming_them(tiny, tmp_path, capsys, drop, named):
    """Item 7: a GGUF without some of its tensors was materialised with those weights random, exit 0."""
    assert named in refused(rewrite(tiny, tmp_path / "x.gguf", drop=drop), tmp_path, capsys)


def test_a_missing_block_and_a_large_config_are_refused_before_any_allocation(tiny, tmp_path, capsys):
    """A file that declares more blocks than it holds (a whole block missing), and a tensor-less file with the
    configuration of a 16B-parameter model (~68 GB in float32 before), stop at the header: at once."""
    two = rewrite(tiny, tmp_path / "two.gguf", fields={"llama.block_count": (2, V.UINT32, None)})
    assert "lacks every tensor of block 1 (blk.1.*); expected the tensors of each of the 2 blocks" in refused(
        two, tmp_path, capsys
    )
    large = {"llama.block_count": (48, V.UINT32, None), "llama.embedding_length": (6144, V.UINT32, None),
             "llama.feed_forward_length": (16384, V.UINT32, None), "llama.head_count": (48, V.UINT32, None),
             "llama.head_count_kv": (48, V.UINT32, None)}  # fmt: skip
    # the header check's own message: the model was never built (68 GB on a 24 GB machine would end in an OOM kill)
    err = refused(rewrite(tiny, tmp_path / "large.gguf", drop=("",), fields=large), tmp_path, capsys)
    assert "lacks every tensor of block 0" in err
    wide = rewrite(tiny, tmp_path / "wide.gguf", fields={"llama.embedding_length": (6144, V.UINT32, None)})
    err = refused(wide, tmp_path, capsys)
    assert "tensors of another size than its metadata implies: token_embd.weight (8,384 values; expected " in err


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused(tiny, tmp_path, capsys, bad):
    def poisoned(name, data):
        if name == "blk.0.attn_k.weight":
            data[1, 2] = bad
        return data

    err = refused(rewrite(tiny, tmp_path / "nan.gguf", values=poisoned), tmp_path, capsys)
    assert "the weights model.layers.0.self_attn.k_proj.weight hold NaN or infinite values" in err


def patched(data: bytes, offset: int, count: int) -> bytes:
    return data[:offset] + struct.pack("<Q", count) + data[offset + 8 :]


def test_crafted_headers_are_one_line(tiny, tmp_path, capsys):
    """Item 18: truncated files, counts beyond the file, tokens stored as other types, malformed merges, ids and
    metadata of other types: each a one-line PitError, not a traceback."""
    data = tiny.read_bytes()
    tokens = gguf.GGUFReader(tiny).fields["tokenizer.ggml.tokens"]
    count_at = tokens.offset + 8 + len(tokens.name.encode()) + 8  # after the key, its type and the item type
    assert struct.unpack_from("<Q", data, count_at) == (262,)
    raw = {
        "cut.gguf": (data[:100], "is not a readable GGUF file ("),
        "half.gguf": (data[: len(data) // 2], "is not a readable GGUF file ("),
        "tensors.gguf": (patched(data, 8, 10**12), "is not a readable GGUF file ("),  # tensor count
        "fields.gguf": (patched(data, 16, 10**12), "is not a readable GGUF file ("),  # field count
        "array.gguf": (patched(data, count_at, 10**15), "is not a readable GGUF file ("),  # the tokens' count
    }
    for name, (content, said) in raw.items():
        (tmp_path / name).write_bytes(content)
        assert said in refused(tmp_path / name, tmp_path, capsys), name
    tok = "tokenizer.ggml."
    fields = {
        "ints": ({f"{tok}tokens": (list(range(262)), V.ARRAY, V.INT32)}, "tokens is of type ARRAY/INT32; expected"),
        "one": ({f"{tok}tokens": ("the", V.STRING, None)}, "tokens is of type STRING; expected ['ARRAY', 'STRING']"),
        "glued": ({f"{tok}merges": (["Ġt", "h e"], V.ARRAY, V.STRING)}, "merges[0] is 'Ġt'; expected 'a b'"),
        "three": ({f"{tok}merges": (["h e", "Ġ t h"], V.ARRAY, V.STRING)}, "merges[1] is 'Ġ t h'; expected"),
        "unknown": ({f"{tok}merges": (["Ġ q"], V.ARRAY, V.STRING)}, "merges[0] is 'Ġ q'; expected"),
        "numbers": ({f"{tok}merges": ([1, 2], V.ARRAY, V.INT32)}, "merges is of type ARRAY/INT32; expected"),
        "types": ({f"{tok}token_type": ([1, 1], V.ARRAY, V.INT32)}, "token_type has 2 entries; expected one per"),
        "bos": ({f"{tok}bos_token_id": (10**6, V.UINT32, None)}, "bos_token_id is 1000000; expected the id of one"),
        "notokens": ({f"{tok}tokens": None}, "no field tokenizer.ggml.tokens;"),
        "blocks": ({"llama.block_count": ("x", V.STRING, None)}, "num_hidden_layers"),
    }
    for name, (change, said) in fields.items():
        assert said in refused(rewrite(tiny, tmp_path / f"{name}.gguf", fields=change), tmp_path, capsys), name
