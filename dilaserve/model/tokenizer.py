"""A word-level tokenizer for the synthetic task language, built locally.

Every symbol of the tasks is one token, so a token is a unit of meaning the
tiny model can learn quickly. It is saved as a ``PreTrainedTokenizerFast``
beside the weights and loads with ``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from dilaserve.tasks.arith import NUMBER_WORDS

PAD, MASK, EOS, UNK = "[PAD]", "[MASK]", "[EOS]", "[UNK]"
SPECIAL_TOKENS = [PAD, MASK, EOS, UNK]
SYMBOLS = list("+-*=,;:<>")
TASK_WORDS = ["list", "pairs", "arith"]
# The number words (``arith`` prompts) come last, so the ids of older checkpoints stay put.
VOCAB = SPECIAL_TOKENS + list(string.ascii_lowercase) + list(string.digits) + SYMBOLS + TASK_WORDS + list(NUMBER_WORDS)


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        mask_token=MASK,
        eos_token=EOS,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
    )
