#!/usr/bin/env python3
"""Write a tiny multimodal projector (a CLIP vision encoder and an MLP projector, LLaVA style)
with random weights, which llama-server accepts with --mmproj beside a text model.

Usage (python3 with numpy; gguf-py from a llama.cpp checkout):
  python3 make_mmproj.py --gguf-py LLAMA_CPP/gguf-py --out mmproj.gguf --text-dim 64

--text-dim must be the text model's embedding length (make_gguf.py's tiny preset: 64): the
projector's output is fed to the model as token embeddings. Key and tensor names are those of
llama.cpp's tools/mtmd/clip-impl.h (projector type "mlp": mm.0 and mm.2). A 32×32 image in 8×8
patches makes 16 image tokens.
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--text-dim", type=int, required=True, help="the text model's embedding length")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    import numpy as np
    from gguf import GGUFWriter

    E, FF, L, H, IMG, P = 32, 64, 1, 2, 32, 8
    D = a.text_dim
    rng = np.random.default_rng(a.seed)

    def rand(*shape):  # numpy shape is ggml's reversed
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    def zeros(n):
        return np.zeros((n,), dtype=np.float32)

    def ones(n):
        return np.ones((n,), dtype=np.float32)

    w = GGUFWriter(a.out, "clip")
    w.add_name("random-mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_uint32("clip.vision.image_size", IMG)
    w.add_uint32("clip.vision.patch_size", P)
    w.add_uint32("clip.vision.embedding_length", E)
    w.add_uint32("clip.vision.feed_forward_length", FF)
    w.add_uint32("clip.vision.projection_dim", D)
    w.add_uint32("clip.vision.block_count", L)
    w.add_uint32("clip.vision.attention.head_count", H)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_bool("clip.use_gelu", True)
    w.add_file_type(1)
    w.add_tensor("v.patch_embd.weight", rand(E, 3, P, P))
    w.add_tensor("v.position_embd.weight", rand((IMG // P) ** 2, E))
    for i in range(L):
        p = "v.blk.%d." % i
        for n in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(p + n + ".weight", rand(E, E))
            w.add_tensor(p + n + ".bias", zeros(E))
        for n in ("ln1", "ln2"):
            w.add_tensor(p + n + ".weight", ones(E))
            w.add_tensor(p + n + ".bias", zeros(E))
        w.add_tensor(p + "ffn_up.weight", rand(FF, E))
        w.add_tensor(p + "ffn_up.bias", zeros(FF))
        w.add_tensor(p + "ffn_down.weight", rand(E, FF))
        w.add_tensor(p + "ffn_down.bias", zeros(E))
    w.add_tensor("mm.0.weight", rand(D, E))
    w.add_tensor("mm.0.bias", zeros(D))
    w.add_tensor("mm.2.weight", rand(D, D))
    w.add_tensor("mm.2.bias", zeros(D))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
