"""Stage 2: the byte-level BPE tokenizer and the token streams it makes of the documents."""
from __future__ import annotations

import numpy as np

from .common import EOT_ID, MASK_ID, PAD_ID, SPECIALS


def train_tokenizer(docs: list[str], vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, min_frequency=2, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    assert [tok.token_to_id(s) for s in SPECIALS] == [EOT_ID, PAD_ID, MASK_ID]
    return tok


def encode_docs(tok, docs: list[str]) -> np.ndarray:
    """All documents as one stream, each followed by <|endoftext|>."""
    out = []
    for enc in tok.encode_batch(docs):
        out.extend(enc.ids)
        out.append(EOT_ID)
    return np.asarray(out, dtype=np.int32)
