"""runner's byte ids as a Hugging Face tokenizer (``tokenizer.json``) whose ids are exactly ``ByteTokens``', so an
exported byte-level model reads text in ``transformers.pipeline`` as it did in training."""

from __future__ import annotations

from typing import Any

PAD = "<pad>"  # The pad token of a family whose byte ids start at 1 (id 0)


def byte_tokenizer(offset: int = 0, max_length: int | None = None) -> Any:
    """A ``transformers`` fast tokenizer giving the ids ``ByteTokens(offset)`` gives; ``max_length``: where
    ``truncation=True`` cuts a text (the run's ``data.seq_len``, where it cut its texts)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    # Each byte's character in GPT-2's byte-to-unicode table, the one ``tokenizers``' ``ByteLevel`` uses
    vocab = {char: byte + offset for byte, char in sorted(bytes_to_unicode().items())}
    if offset:
        vocab[PAD] = 0
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    extra: dict[str, Any] = {"pad_token": PAD} if offset else {}
    if max_length is not None:
        extra["model_max_length"] = max_length
    # token_type_ids are not among the inputs: runner's models were trained without them.
    return PreTrainedTokenizerFast(tokenizer_object=tok, split_special_tokens=True,
                                   clean_up_tokenization_spaces=False,
                                   model_input_names=["input_ids", "attention_mask"], **extra)
