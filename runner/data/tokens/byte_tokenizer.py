"""runner's byte ids as a Hugging Face tokenizer: ``tokenizers``' own format (``tokenizer.json``), loaded by
``AutoTokenizer``, whose ids are exactly ``ByteTokens``' (each UTF-8 byte of the text plus the family's offset; with an
offset, id 0 pads), so an exported byte-level model reads text in ``transformers.pipeline`` as it did in training."""

from __future__ import annotations

from typing import Any

PAD = "<pad>"  # The pad token of a family whose byte ids start at 1 (id 0)


def byte_alphabet() -> dict[int, str]:
    """Each byte's character in GPT-2's byte-to-unicode table, the one ``tokenizers``' ``ByteLevel`` uses: the printable
    Latin-1 bytes are themselves, the other 68 are the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + len(table) - len(printable))
    return dict(sorted(table.items()))


def byte_tokenizer(offset: int = 0, max_length: int | None = None) -> Any:
    """A ``transformers`` fast tokenizer giving the ids ``ByteTokens(offset)`` gives; ``max_length``: where
    ``truncation=True`` cuts a text (the run's ``data.seq_len``, where it cut its texts)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: byte + offset for byte, char in byte_alphabet().items()}
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
