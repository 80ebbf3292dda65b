"""A word-level tokenizer that transformers' AutoTokenizer loads from a folder, with no download: what SGLang's
benchmark and prompt adapters need of a model's tokenizer, for the tests that run them."""

from __future__ import annotations

import json
from pathlib import Path


def word_tokenizer(directory: Path, words: list[str], chat_template: str | None = None) -> Path:
    """``directory`` holding a tokenizer whose ids are ``words``' positions (the first is the unknown word), split on
    whitespace, with ``chat_template`` where given."""
    directory.mkdir()
    (directory / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)}, "unk_token": words[0]}}))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": words[0]}
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {**config, "chat_template": chat_template} if chat_template else config))
    return directory
