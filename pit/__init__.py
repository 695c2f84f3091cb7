"""Pseudo-Inverse Tying (PIT) for language models, and the reproduction pipeline's library.

`pit.tying` holds the token interfaces (PIT, TT, untied); `pit.models` the model families
(importing it registers them with the `transformers` Auto classes); `pit.cli` the command line.
"""

__version__ = "0.1.0"
