"""Pseudo-Inverse Tying (PIT) for language models, and the reproduction pipeline's library.

Layers, imports pointing downward (docs/architecture.md): `pit.core` (the paper's math: token interfaces,
fused loss, metrics), `pit.models` (model families; importing it registers them with the `transformers`
Auto classes), `pit.data`, `pit.tracking`, `pit.analysis`, `pit.evaluation`, `pit.training`,
`pit.reporting`, and `pit.commands` (the `pit` command line).
"""

from pit.checkout import VERSION as __version__  # noqa: F401  (one copy: pyproject.toml reads it too)
