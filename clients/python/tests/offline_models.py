"""Tiny Hugging Face tokenizers (and model directories) made here for the trainer-package
tests, so nothing is downloaded: a byte-level BPE (lossless on any text) trained on a few
strings, with a chat template in the ChatML layout."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: ChatML: ``<|im_start|>role\\ncontent<|im_end|>\\n`` per message, then the assistant's header.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS, PAD = "<|im_end|>", "<|endoftext|>"


def offline_tokenizer(
    corpus: Iterable[str], *, chat_template: str = CHATML_TEMPLATE, vocab_size: int = 800
) -> Any:
    """A ``PreTrainedTokenizerFast`` trained on ``corpus`` (what the tests encode most, so
    sequences stay short), ``<|im_end|>`` its end of turn and ``<|endoftext|>`` its padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(["system user assistant tool", *corpus], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=PAD)
    fast.chat_template = chat_template
    return fast


def llama_dir(path: Path, tokenizer: Any) -> Path:
    """A model directory VERL's ``HFModelConfig`` loads offline: the tokenizer and a
    one-layer Llama config (no weights: VERL's agent loop never runs the model)."""
    from transformers import LlamaConfig

    tokenizer.save_pretrained(path)
    LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(path)
    return path
