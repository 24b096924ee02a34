#!/usr/bin/env python3
"""Makes a block-scaled FP8 checkpoint of a bf16 Qwen3.5 checkpoint, in the layout of the released
Qwen3.5 -FP8 checkpoints (docs/fp8.md), and optionally the same model with the FP8 weights
dequantised and stored f32 or bf16 (for parity tests).

    python3 tools/make_fp8_checkpoint.py models/tandem-tiny-qwen35 OUT_DIR \
        [--dequantized-f32 DIR] [--dequantized-bf16 DIR]

Layout written (what tandem's loader accepts, src/model/arch/qwen35_weights.cpp):
  - config.json gains quantization_config {quant_method "fp8", fmt "e4m3", activation_scheme
    "dynamic", weight_block_size [128, 128], modules_to_not_convert [...]};
  - the linear weights self_attn.{q,k,v,o}_proj, linear_attn.{in_proj_qkv, in_proj_z, out_proj}
    and mlp.{gate,up,down}_proj (MTP layer included) are stored F8_E4M3, each with an F32
    `<name>_scale_inv` [ceil(out / 128), ceil(in / 128)];
  - kept bf16, as the released checkpoints keep them: embed_tokens, lm_head, every norm,
    linear_attn.{conv1d, A_log, dt_bias, in_proj_a, in_proj_b}, mtp.fc.
Quantisation (per 128 x 128 block, blocks at the right/bottom edges partial): scale_inv =
f32(max(amax, 1e-12) / 448); q = e4m3(f32(w / scale_inv)), round to nearest even, saturating to
+-448. Dequantised: f32(e4m3_value(q) * scale_inv), the CPU reference's one fp32 multiply; the bf16
variant rounds that to bf16 (nearest even), which is what tandem's CUDA loader computes.
Only the Python standard library is used (no numpy, no torch), so CTest can run it anywhere.
"""

import argparse
import array
import bisect
import json
import math
import os
import shutil
import struct
import sys

BLOCK = 128
E4M3_MAX = 448.0
QUANTIZED = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
             "self_attn.o_proj.weight", "linear_attn.in_proj_qkv.weight",
             "linear_attn.in_proj_z.weight", "linear_attn.out_proj.weight",
             "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
COPIED = ("generation_config.json", "tokenizer.json", "tokenizer_config.json")


def e4m3_value(code):
    """The value of an e4m3 (float8_e4m3fn) code; None for the NaN codes 0x7f, 0xff."""
    e, m = (code >> 3) & 0xF, code & 7
    if e == 15 and m == 7:
        return None
    mag = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -mag if code & 0x80 else mag


VALUES = [e4m3_value(c) for c in range(256)]


def build_rounding_table():
    """Thresholds and codes such that codes[bisect_left(thresholds, x)] is x rounded to nearest
    even e4m3 (saturating), for any finite x; the zero bucket's sign is fixed by the caller."""
    entries = [(VALUES[0x80 | i], 0x80 | i) for i in range(126, 0, -1)]
    entries += [(0.0, 0x00)]
    entries += [(VALUES[i], i) for i in range(1, 127)]
    thresholds, codes = [], [entries[0][1]]
    for (lo, _), (hi, hi_code) in zip(entries, entries[1:]):
        mid = (lo + hi) / 2  # exact: neighbouring e4m3 values are within a factor 2
        # bisect_left puts x == threshold in the lower bucket: a tie whose upper code is even
        # (mantissa LSB 0) must go up, so its threshold moves just below the midpoint.
        thresholds.append(math.nextafter(mid, -math.inf) if hi_code & 1 == 0 else mid)
        codes.append(hi_code)
    return thresholds, codes


THRESHOLDS, CODES = build_rounding_table()


def to_e4m3(x):
    c = CODES[bisect.bisect_left(THRESHOLDS, x)]
    if c == 0 and math.copysign(1.0, x) < 0:
        c = 0x80  # negative values rounding to zero keep their sign, as torch's cast does
    return c


def f32(values):
    """Rounds Python floats to f32 (nearest even), as an array('f')."""
    return array.array("f", values)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return {name: (info["dtype"], info["shape"],
                   memoryview(data)[base + info["data_offsets"][0]:base + info["data_offsets"][1]])
            for name, info in header.items()}


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, shape, bytes); written in name order."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in sorted(tensors):
            f.write(tensors[name][2])


def bf16_to_floats(raw):
    halves = array.array("H")
    halves.frombytes(bytes(raw))
    words = array.array("I", (h << 16 for h in halves))
    out = array.array("f")
    out.frombytes(words.tobytes())
    return out


def floats_to_bf16(values):
    words = array.array("I")
    words.frombytes(values.tobytes())
    # round to nearest even (no NaN here)
    return array.array("H", ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 for u in words)).tobytes()


def quantize(w, rows, cols):
    """Block-scaled e4m3 of a [rows, cols] f32 matrix: (codes bytes, scales, dequantised f32)."""
    rb, cb = -(-rows // BLOCK), -(-cols // BLOCK)
    codes = bytearray(rows * cols)
    scales = array.array("f", [0.0] * (rb * cb))
    deq = array.array("f", [0.0]) * (rows * cols)
    for br in range(rb):
        r0, r1 = br * BLOCK, min(rows, br * BLOCK + BLOCK)
        for bc in range(cb):
            c0, c1 = bc * BLOCK, min(cols, bc * BLOCK + BLOCK)
            amax = max(max(abs(v) for v in w[r * cols + c0:r * cols + c1]) for r in range(r0, r1))
            s = f32([max(amax, 1e-12) / E4M3_MAX])[0]
            scales[br * cb + bc] = s
            for r in range(r0, r1):
                q = [to_e4m3(x) for x in f32([v / s for v in w[r * cols + c0:r * cols + c1]])]
                codes[r * cols + c0:r * cols + c1] = bytes(q)
                deq[r * cols + c0:r * cols + c1] = f32([VALUES[c] * s for c in q])
    return bytes(codes), scales, deq


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("src", help="bf16 checkpoint directory (config.json + model.safetensors)")
    ap.add_argument("out", help="directory for the FP8 checkpoint")
    ap.add_argument("--dequantized-f32", help="also write the dequantised model, FP8 weights as f32")
    ap.add_argument("--dequantized-bf16", help="also write it with those weights rounded to bf16")
    args = ap.parse_args()

    with open(os.path.join(args.src, "config.json")) as f:
        config = json.load(f)
    tensors = read_safetensors(os.path.join(args.src, "model.safetensors"))
    fp8, f32_out, bf16_out, keep = {}, {}, {}, []
    for name, (dtype, shape, raw) in sorted(tensors.items()):
        if not name.endswith(QUANTIZED):
            for d in (fp8, f32_out, bf16_out):
                d[name] = (dtype, shape, raw.tobytes())
            if len(shape) == 2 and name.endswith(".weight"):
                keep.append(name[:-len(".weight")])  # a linear/embedding kept bf16
            continue
        if dtype != "BF16" or len(shape) != 2:
            sys.exit(f"{name}: expected a BF16 matrix, got {dtype} {shape}")
        rows, cols = shape
        codes, scales, deq = quantize(bf16_to_floats(raw), rows, cols)
        fp8[name] = ("F8_E4M3", shape, codes)
        fp8[name + "_scale_inv"] = ("F32", [-(-rows // BLOCK), -(-cols // BLOCK)], scales.tobytes())
        f32_out[name] = ("F32", shape, deq.tobytes())
        bf16_out[name] = ("BF16", shape, floats_to_bf16(deq))

    quant = {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [BLOCK, BLOCK],
        "modules_to_not_convert": keep,
    }
    outputs = [(args.out, fp8, dict(config, quantization_config=quant))]
    if args.dequantized_f32:
        outputs.append((args.dequantized_f32, f32_out, config))
    if args.dequantized_bf16:
        outputs.append((args.dequantized_bf16, bf16_out, config))
    for out_dir, ts, cfg in outputs:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        write_safetensors(os.path.join(out_dir, "model.safetensors"), ts)
        for name in COPIED:
            if os.path.exists(os.path.join(args.src, name)):
                shutil.copyfile(os.path.join(args.src, name), os.path.join(out_dir, name))
        print(f"wrote {out_dir}")


if __name__ == "__main__":
    main()
