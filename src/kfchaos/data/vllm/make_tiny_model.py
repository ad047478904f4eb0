"""Build the tiny model the real vLLM engine serves in kfchaos's tests and `kfchaos demo --engine vllm`.

Run with the engine's own Python (it needs torch, transformers and tokenizers, which kfchaos does not):

    <engine venv>/bin/python make_tiny_model.py OUT_DIR

Deterministic: the tokenizer is trained on text this script makes from a fixed word list (no download), the weights
are drawn from a seeded generator, and the files are written with `save_pretrained`. Nothing is read from a hub
(HF_HUB_OFFLINE=1 is set before transformers is imported). OUT_DIR/model is a Llama of 2 layers and hidden size 128
(random weights: it answers noise, so callers ask for `ignore_eos` or a fixed length), OUT_DIR/lora/<name> are
two LoRA adapters in PEFT's layout (adapter_config.json + adapter_model.safetensors, peft/utils/save_and_load.py
names: base_model.model.<module>.lora_A.weight), for vLLM's runtime LoRA endpoints.

This file is not imported by kfchaos: it is package data, run by path with the engine's interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 20261206
VOCAB_SIZE = 4096
MAX_POSITIONS = 8192
HIDDEN = 128
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 256
LORA_RANK = 8
LORA_ADAPTERS = ("tiny-sql", "tiny-support")
LORA_TARGETS = ("q_proj", "v_proj")

# The words kfchaos's replayer writes prompts with (kfchaos.traffic.wire, kfchaos.traffic.trafficfaults.chain), so
# that each is one token after a space, as in the byte-level BPE vocabularies of real models; then more common words.
_REPLAY_WORDS_TEXT = (
    "the river stone cloud light house green table paper water music field night market window story "
    "garden bread north winter and for you are not but all can had was one our out day new summarize "
    "above"
)
REPLAY_WORDS = _REPLAY_WORDS_TEXT.split()
_MORE_WORDS_TEXT = (
    "a an is it of to in on at by as be we he she they them this that with from have has will would could "
    "should there their what when where which who why how about after again against before between during "
    "into over under more most other some such only own same than too very just now then here time year "
    "people way man woman child world life hand part place case week company system program question work "
    "government number point home school state family student group country problem fact right eye word "
    "business issue side kind head service friend power hour game line end member law car city community "
    "name president team minute idea body information back parent face others level office door health "
    "person art war history party result change morning reason research girl guy moment air teacher force "
    "education user assistant system hello please answer explain write code list table data model token "
    "cache memory request server latency error"
)
MORE_WORDS = _MORE_WORDS_TEXT.split()
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]


def corpus(lines: int = 20000) -> list[str]:
    """Text for the tokenizer: seeded sentences over the word lists, the replay's words most often."""
    rng = random.Random(SEED)
    words = REPLAY_WORDS * 4 + MORE_WORDS
    text = []
    for _ in range(lines):
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 24)))
        text.append(sentence[0].upper() + sentence[1:] + rng.choice(".?!"))
    return text


def build_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = MAX_POSITIONS
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, tokenizer: PreTrainedTokenizerFast) -> None:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)


def build_lora(out: Path, name: str, index: int) -> None:
    """A rank-8 adapter on q_proj and v_proj of every layer, in PEFT's file layout (what vLLM's
    vllm/lora/lora_model.py reads: adapter_config.json and adapter_model.safetensors)."""
    generator = torch.Generator().manual_seed(SEED + 1 + index)
    head_dim = HIDDEN // HEADS
    sizes = {"q_proj": HEADS * head_dim, "v_proj": KV_HEADS * head_dim}
    tensors = {}
    for layer in range(LAYERS):
        for target in LORA_TARGETS:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{target}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(LORA_RANK, HIDDEN, generator=generator) * 0.01
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(sizes[target], LORA_RANK, generator=generator) * 0.01
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": None,
        "r": LORA_RANK,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": list(LORA_TARGETS),
        "fan_in_fan_out": False,
        "inference_mode": True,
        "modules_to_save": None,
    }
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def digest(folder: Path) -> str:
    """sha256 over every file's relative path and bytes: the same folder twice is the same build."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[1])
    model_dir = out / "model"
    tokenizer = build_tokenizer(model_dir)
    build_model(model_dir, tokenizer)
    for index, name in enumerate(LORA_ADAPTERS):
        build_lora(out / "lora" / name, name, index)
    print(json.dumps({"model": str(model_dir), "digest": digest(out), "vocab_size": len(tokenizer)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
