"""Analyses of trained checkpoints: `diagnostics` (Table 2, direct path; `pit diagnose`), `layerwise`
(Figure 2's two decodings) and `side_effects` (what a post-training update changed)."""
