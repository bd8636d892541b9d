"""The packaged BERT model as an ONNX graph, written from its safetensors weights (no torch export).

Why written and not exported: ``torch.onnx.export`` changes exporter from one torch release to the
next (and the current one needs ``onnxscript`` and traces through transformers), while this encoder
is ~20 standard ONNX operators per layer. Writing the graph from the weights needs only ``onnx``,
never touches the network, and gives the same bytes for the same weights on every machine, so the
cached file can be checked against a checksum.

The graph takes one text (``input_ids``: int64 ``[n]``, with [CLS]/[SEP]) and returns its last
hidden states (float32 ``[n, hidden]``): pooling happens outside (whole text and sentence spans
from one pass). One text per run, no padding and no mask: a text's arithmetic is a function of the
text alone, so its rows do not depend on any other text.

The int8 variant is ONNX Runtime's dynamic quantisation of the four dense layers of each encoder
layer (weights int8 per output channel, activations quantised per run); attention's own products
stay fp32.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import numpy as np

#: bumped whenever the graph written below changes (part of the cache folder's name)
GRAPH_VERSION = 1
OPSET = 17


def build_model(
    model_dir: Path,
    *,
    layers: int | None = None,
    replace: Mapping[str, np.ndarray] | None = None,
    readout: tuple[np.ndarray, np.ndarray] | None = None,
) -> Any:
    """The fp32 ``onnx.ModelProto`` of the BERT encoder in ``model_dir`` (config.json + model.safetensors).

    The defaults give the embedder's graph. The verifier's cross-encoder is the same encoder cut to
    its first ``layers`` layers, with those layers' weights taken from ``replace`` (the model's own
    names, ``encoder.layer.0.attention.self.query.weight`` ...), a second input ``token_type_ids``
    (a pair's two texts) and, from ``readout`` (weight ``[hidden]``, bias ``[1]``), one output
    ``logit`` read off the [CLS] row; the embeddings stay the packaged model's own."""
    import onnx
    from onnx import TensorProto, helper

    shape = _read_config(model_dir)
    if layers is not None:
        shape = shape._replace(layers=int(layers))
    g = _GraphBuilder(*_load_weights(model_dir, replace))
    c = _shared_constants(g, shape)
    x = _embeddings(g, c, shape.eps, pair=readout is not None)
    for i in range(shape.layers):
        x = _encoder_layer(g, c, i, x, shape.eps, "tokens" if i == shape.layers - 1 else f"l{i}_ln2")
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["n"])]
    outputs = [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["n", shape.hidden])]
    if readout is not None:
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["n"]))
        _readout(g, c, readout, shape.hidden)
        outputs = [helper.make_tensor_value_info("logit", TensorProto.FLOAT, [1])]
    graph = helper.make_graph(
        g.nodes,
        "groundlens_bert" if readout is None else "groundlens_verifier",
        inputs,
        outputs,
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="groundlens")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


class _Shape(NamedTuple):
    """The encoder's dimensions from config.json (``layers`` may be cut by the caller)."""

    layers: int
    heads: int
    hidden: int
    eps: float


class _Constants(NamedTuple):
    """Names of the shape and scalar initializers every layer shares."""

    zero: str
    shape_heads: str
    split3: str
    shape_ctx: str
    scale: str
    half: str
    inv_sqrt2: str
    one_f: str


def _read_config(model_dir: Path) -> _Shape:
    """The encoder's dimensions, refusing the BERT variants the graph below does not write."""
    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if cfg.get("hidden_act", "gelu") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("the ONNX backend supports BERT with exact GELU and absolute positions only")
    return _Shape(
        layers=int(cfg["num_hidden_layers"]),
        heads=int(cfg["num_attention_heads"]),
        hidden=int(cfg["hidden_size"]),
        eps=float(cfg.get("layer_norm_eps", 1e-12)),
    )


def _load_weights(model_dir: Path, replace: Mapping[str, np.ndarray] | None) -> tuple[dict[str, np.ndarray], str]:
    """The safetensors weights with ``replace`` laid over them, and the prefix their names carry
    (``bert.`` in some exports): the rest of the builder reads the model's own names."""
    from safetensors.numpy import load_file

    w = load_file(str(model_dir / "model.safetensors"))
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
    if replace:
        w.update({prefix + k: np.asarray(v) for k, v in replace.items()})
    return w, prefix


class _GraphBuilder:
    """Collects initializers and nodes in the order they are made: that order is the graph's bytes."""

    def __init__(self, w: Mapping[str, np.ndarray], prefix: str):
        self.w = w
        self.prefix = prefix
        self.inits: list[Any] = []
        self.nodes: list[Any] = []

    def raw(self, name: str) -> np.ndarray:
        """The stored tensor of the model's own ``name``, as loaded."""
        return self.w[self.prefix + name]

    def const(self, name: str, value: np.ndarray) -> str:
        """An initializer ``name`` holding ``value``; returns the name to wire it in."""
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def weight(self, name: str, transpose: bool = False) -> str:
        """The model's tensor ``name`` as an fp32 initializer of that name (``transpose``: a dense
        layer's ``[out, in]`` weight as MatMul's ``[in, out]`` operand)."""
        value = self.raw(name).astype(np.float32)
        return self.const(name, value.T if transpose else value)

    def node(self, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        """A one-output node named after its output; returns that name to chain nodes."""
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def split(self, x: str, sizes: str, outputs: list[str], name: str) -> None:
        """A Split node, the one node here with more than one output."""
        from onnx import helper

        self.nodes.append(helper.make_node("Split", [x, sizes], outputs, name=name, axis=1))


def _shared_constants(g: _GraphBuilder, shape: _Shape) -> _Constants:
    """The shape and scalar initializers, made once ahead of the embeddings."""
    hd = shape.hidden // shape.heads
    return _Constants(
        zero=g.const("zero_i64", np.array([0], dtype=np.int64)),
        shape_heads=g.const("shape_heads", np.array([-1, shape.heads, hd], dtype=np.int64)),
        split3=g.const("split3", np.array([shape.hidden] * 3, dtype=np.int64)),
        shape_ctx=g.const("shape_ctx", np.array([-1, shape.hidden], dtype=np.int64)),
        scale=g.const("attn_scale", np.array(1.0 / math.sqrt(hd), dtype=np.float32)),
        half=g.const("half", np.array(0.5, dtype=np.float32)),
        inv_sqrt2=g.const("inv_sqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32)),
        one_f=g.const("one_f32", np.array(1.0, dtype=np.float32)),
    )


def _embeddings(g: _GraphBuilder, c: _Constants, eps: float, *, pair: bool) -> str:
    """(word + token type) + position, then LayerNorm, in HF BERT's order; a pair reads its token
    types from ``token_type_ids``, a single text uses type 0 as a constant row."""
    n = g.node("Shape", ["input_ids"], "n_tokens")  # [n]: the first n position embeddings
    pos = g.node("Slice", [g.weight("embeddings.position_embeddings.weight"), c.zero, n, c.zero], "emb_pos")
    word = g.node("Gather", [g.weight("embeddings.word_embeddings.weight"), "input_ids"], "emb_word")
    if pair:  # a pair's two texts: token types 0 and 1
        type0 = g.node("Gather", [g.weight("embeddings.token_type_embeddings.weight"), "token_type_ids"], "emb_types")
    else:
        type0 = g.const("emb_type0", g.raw("embeddings.token_type_embeddings.weight")[0].astype(np.float32))
    x = g.node("Add", [g.node("Add", [word, type0], "emb_wt"), pos], "emb_sum")
    return g.node(
        "LayerNormalization",
        [x, g.weight("embeddings.LayerNorm.weight"), g.weight("embeddings.LayerNorm.bias")],
        "emb_out",
        axis=-1,
        epsilon=eps,
    )


def _encoder_layer(g: _GraphBuilder, c: _Constants, i: int, x: str, eps: float, out: str) -> str:
    """Encoder layer ``i`` on the rows ``x``: attention, then the feed-forward block, each with its
    residual and LayerNorm; the last LayerNorm is named ``out``."""
    p = f"encoder.layer.{i}."
    t = f"l{i}_"
    ctx = _self_attention(g, c, p, t, x)
    o = g.node("MatMul", [ctx, g.weight(p + "attention.output.dense.weight", True)], t + "o_mm")
    o = g.node("Add", [o, g.weight(p + "attention.output.dense.bias")], t + "o")
    a = g.node(
        "LayerNormalization",
        [
            g.node("Add", [o, x], t + "res1"),
            g.weight(p + "attention.output.LayerNorm.weight"),
            g.weight(p + "attention.output.LayerNorm.bias"),
        ],
        t + "ln1",
        axis=-1,
        epsilon=eps,
    )
    h = g.node("MatMul", [a, g.weight(p + "intermediate.dense.weight", True)], t + "i_mm")
    h = g.node("Add", [h, g.weight(p + "intermediate.dense.bias")], t + "i")
    # exact GELU: x * 0.5 * (1 + erf(x / sqrt(2))) (the pattern ONNX Runtime fuses into one kernel)
    erf = g.node("Erf", [g.node("Mul", [h, c.inv_sqrt2], t + "g_div")], t + "g_erf")
    gelu = g.node(
        "Mul", [g.node("Mul", [h, g.node("Add", [erf, c.one_f], t + "g_add")], t + "g_mul"), c.half], t + "gelu"
    )
    o2 = g.node("MatMul", [gelu, g.weight(p + "output.dense.weight", True)], t + "o2_mm")
    o2 = g.node("Add", [o2, g.weight(p + "output.dense.bias")], t + "o2")
    return g.node(
        "LayerNormalization",
        [
            g.node("Add", [o2, a], t + "res2"),
            g.weight(p + "output.LayerNorm.weight"),
            g.weight(p + "output.LayerNorm.bias"),
        ],
        out,
        axis=-1,
        epsilon=eps,
    )


def _self_attention(g: _GraphBuilder, c: _Constants, p: str, t: str, x: str) -> str:
    """Multi-head self-attention of the rows ``x`` (one fused q/k/v product, no mask: one text per
    run), returned as the heads' context rows ``[n, hidden]`` before the output projection."""
    wqkv = np.concatenate([g.raw(p + f"attention.self.{k}.weight") for k in ("query", "key", "value")], 0)
    bqkv = np.concatenate([g.raw(p + f"attention.self.{k}.bias") for k in ("query", "key", "value")], 0)
    qkv = g.node("MatMul", [x, g.const(t + "wqkv", wqkv.astype(np.float32).T)], t + "qkv_mm")
    qkv = g.node("Add", [qkv, g.const(t + "bqkv", bqkv.astype(np.float32))], t + "qkv")
    q, k, v = t + "q_2d", t + "k_2d", t + "v_2d"
    g.split(qkv, c.split3, [q, k, v], t + "qkv_split")
    # q and v as [heads, n, hd], k transposed to [heads, hd, n]
    q = g.node("Transpose", [g.node("Reshape", [q, c.shape_heads], t + "q_r")], t + "q", perm=[1, 0, 2])
    kt = g.node("Transpose", [g.node("Reshape", [k, c.shape_heads], t + "k_r")], t + "kt", perm=[1, 2, 0])
    v = g.node("Transpose", [g.node("Reshape", [v, c.shape_heads], t + "v_r")], t + "v", perm=[1, 0, 2])
    scores = g.node("Mul", [g.node("MatMul", [q, kt], t + "att_qk"), c.scale], t + "att_scores")
    probs = g.node("Softmax", [scores], t + "att_probs", axis=-1)
    ctx = g.node("MatMul", [probs, v], t + "att_ctx")  # [heads, n, hd]
    return g.node("Reshape", [g.node("Transpose", [ctx], t + "ctx_t", perm=[1, 0, 2]), c.shape_ctx], t + "ctx")


def _readout(g: _GraphBuilder, c: _Constants, readout: tuple[np.ndarray, np.ndarray], hidden: int) -> None:
    """The verifier's ``logit``: the [CLS] row of ``tokens`` times the read-out weight, plus its bias."""
    first = g.node("Gather", ["tokens", c.zero], "cls_row", axis=0)  # [1, hidden]
    rw = g.const("readout_w", np.asarray(readout[0], dtype=np.float32).reshape(hidden, 1))
    logit = g.node("MatMul", [first, rw], "logit_mm")
    shape1 = g.const("shape1", np.array([1], dtype=np.int64))
    g.node(
        "Add",
        [g.node("Reshape", [logit, shape1], "logit_r"), g.const("readout_b", np.asarray(readout[1], dtype=np.float32))],
        "logit",
    )


def dense_matmuls(model: Any) -> list[str]:
    """Names of the MatMul nodes with a weight operand (the ones int8 quantisation may touch)."""
    weights = {t.name for t in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]


def attention_matmuls(model: Any) -> list[str]:
    """MatMul nodes between two activations (attention's q.k and probs.v): kept fp32."""
    dense = set(dense_matmuls(model))
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.name not in dense]
