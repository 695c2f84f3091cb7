"""Data stage: download a corpus, build tokenizers, tokenize into flat token files, read windows.

See docs/data.md for the layout on disk and every configuration key.
"""
