"""Write a tiny llama-architecture model in GGUF, made on the spot: nothing is downloaded.

    python scripts/make_tiny_model.py OUT.gguf [--endless] [--context 4096]

One llama block, 64 wide, a byte-level BPE vocabulary of 265 tokens (the 256 bytes, seven
merges, BOS and EOS), about 200 KB. Its weights are random where they do not matter and
set where they do, so that a real inference server (llama.cpp's llama-server, or
llama-cpp-python's) behaves the same on every run at any temperature: the output is a
function of the last token (a bigram walk), which writes the letters a to z and the
digits 0 to 9 once and then stops with EOS, or, with `--endless`, starts over until the
output cap. A byte-level vocabulary makes about a token a byte: the worst case of the
tokenizer's count (docs/providers-tested.md).

It needs `gguf` (the `tiny-model` extra). To serve it with llama-server, as the tests
serve SmolLM2:

    python scripts/make_tiny_model.py /tmp/tiny.gguf --endless
    python -m tests.providers.llama_server /tmp/tiny.gguf --port 8080 --ctx 4096
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import gguf
import numpy as np

WIDTH = 64
HEADS = 4
FEED_FORWARD = 128
BOS, EOS = 256, 257
# In the GPT-2 byte alphabet, "Ġ" is a space.
MERGES = ("Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "e r")
WALK = "abcdefghijklmnopqrstuvwxyz0123456789"
# Each token's successor beats every other token by this many logits: far more than
# sampling at any usual temperature can bridge.
STRENGTH = 40.0
NOISE = 0.002  # the attention and feed-forward weights: random, but too small to matter
TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}<|assistant|>\n"
)


def byte_alphabet() -> list[str]:
    """Return GPT-2's printable stand-in for each byte, as byte-level BPE vocabularies use."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    stand_in = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in stand_in:
            stand_in[b] = chr(256 + extra)
            extra += 1
    return [stand_in[b] for b in range(256)]


def vocabulary() -> tuple[list[str], list[int]]:
    tokens = byte_alphabet() + ["<s>", "</s>"] + [merge.replace(" ", "") for merge in MERGES]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    types[BOS] = types[EOS] = gguf.TokenType.CONTROL
    return tokens, types


def successors(endless: bool, vocab_size: int) -> np.ndarray:
    """Return each token's next token: every token leads into the walk, the walk runs on."""
    walk = [ord(c) for c in WALK]
    after = np.full(vocab_size, walk[0])
    for token, following in itertools.pairwise(walk):
        after[token] = following
    after[walk[-1]] = walk[0] if endless else EOS
    return after


def weights(endless: bool, vocab_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    # Orthogonal embeddings: each letter of the walk has a direction of its own, and every
    # other token shares one more. After the final RMS norm a token's hidden state is its
    # own embedding, so an output row made of its predecessors' directions scores the
    # successor STRENGTH and every other token 0.
    directions, _ = np.linalg.qr(rng.standard_normal((WIDTH, WIDTH)))
    directions = (directions.T * np.sqrt(WIDTH)).astype(np.float32)
    walk = {ord(c): i for i, c in enumerate(WALK)}
    direction_of = [walk.get(t, len(WALK)) for t in range(vocab_size)]
    embedding = directions[direction_of]
    output = np.zeros((vocab_size, WIDTH), dtype=np.float32)
    pairs = set(zip(successors(endless, vocab_size), direction_of, strict=True))
    for following, direction in pairs:
        output[following] += STRENGTH * directions[direction] / WIDTH

    def small(*shape: int) -> np.ndarray:
        return (NOISE * rng.standard_normal(shape)).astype(np.float32)

    ones = np.ones(WIDTH, dtype=np.float32)
    return {
        "token_embd.weight": embedding,
        "blk.0.attn_norm.weight": ones,
        "blk.0.attn_q.weight": small(WIDTH, WIDTH),
        "blk.0.attn_k.weight": small(WIDTH, WIDTH),
        "blk.0.attn_v.weight": small(WIDTH, WIDTH),
        "blk.0.attn_output.weight": small(WIDTH, WIDTH),
        "blk.0.ffn_norm.weight": ones,
        "blk.0.ffn_gate.weight": small(FEED_FORWARD, WIDTH),
        "blk.0.ffn_up.weight": small(FEED_FORWARD, WIDTH),
        "blk.0.ffn_down.weight": small(WIDTH, FEED_FORWARD),
        "output_norm.weight": ones,
        "output.weight": output,
    }


def write(path: Path, *, endless: bool, context: int) -> None:
    tokens, types = vocabulary()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("reportline-tiny-endless" if endless else "reportline-tiny")
    writer.add_context_length(context)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(1)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(list(MERGES))
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE)
    for name, tensor in weights(endless, len(tokens), np.random.default_rng(18)).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--endless", action="store_true", help="never stop before the cap")
    parser.add_argument("--context", type=int, default=4096, help="trained context, tokens")
    args = parser.parse_args(argv)
    write(args.out, endless=args.endless, context=args.context)


if __name__ == "__main__":
    main(sys.argv[1:])
