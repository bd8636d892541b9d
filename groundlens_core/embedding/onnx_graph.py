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
from typing import Any, Mapping

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
    from onnx import TensorProto, helper, numpy_helper
    from safetensors.numpy import load_file

    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if cfg.get("hidden_act", "gelu") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("the ONNX backend supports BERT with exact GELU and absolute positions only")
    layers_n, heads, hidden = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"]), int(cfg["hidden_size"])
    hd = hidden // heads
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    w = load_file(str(model_dir / "model.safetensors"))
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
    if replace:
        w.update({prefix + k: np.asarray(v) for k, v in replace.items()})
    if layers is not None:
        layers_n = int(layers)
    pair = readout is not None

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def weight(name: str, transpose: bool = False) -> str:
        value = w[prefix + name].astype(np.float32)
        return const(name, value.T if transpose else value)

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    zero = const("zero_i64", np.array([0], dtype=np.int64))
    shape_heads = const("shape_heads", np.array([-1, heads, hd], dtype=np.int64))
    split3 = const("split3", np.array([hidden] * 3, dtype=np.int64))
    shape_ctx = const("shape_ctx", np.array([-1, hidden], dtype=np.int64))
    scale = const("attn_scale", np.array(1.0 / math.sqrt(hd), dtype=np.float32))
    half = const("half", np.array(0.5, dtype=np.float32))
    inv_sqrt2 = const("inv_sqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
    one_f = const("one_f32", np.array(1.0, dtype=np.float32))

    # embeddings: (word + token_type 0) + position, then LayerNorm (HF BERT's order)
    n = node("Shape", ["input_ids"], "n_tokens")  # [n]: the first n position embeddings
    pos = node("Slice", [weight("embeddings.position_embeddings.weight"), zero, n, zero], "emb_pos")
    word = node("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"], "emb_word")
    if pair:  # a pair's two texts: token types 0 and 1
        type0 = node("Gather", [weight("embeddings.token_type_embeddings.weight"), "token_type_ids"], "emb_types")
    else:
        type0 = const("emb_type0", w[prefix + "embeddings.token_type_embeddings.weight"][0].astype(np.float32))
    x = node("Add", [node("Add", [word, type0], "emb_wt"), pos], "emb_sum")
    x = node(
        "LayerNormalization",
        [x, weight("embeddings.LayerNorm.weight"), weight("embeddings.LayerNorm.bias")],
        "emb_out",
        axis=-1,
        epsilon=eps,
    )
    for i in range(layers_n):
        p = f"encoder.layer.{i}."
        t = f"l{i}_"
        wqkv = np.concatenate([w[prefix + p + f"attention.self.{k}.weight"] for k in ("query", "key", "value")], 0)
        bqkv = np.concatenate([w[prefix + p + f"attention.self.{k}.bias"] for k in ("query", "key", "value")], 0)
        qkv = node("MatMul", [x, const(t + "wqkv", wqkv.astype(np.float32).T)], t + "qkv_mm")
        qkv = node("Add", [qkv, const(t + "bqkv", bqkv.astype(np.float32))], t + "qkv")
        q, k, v = t + "q_2d", t + "k_2d", t + "v_2d"
        nodes.append(helper.make_node("Split", [qkv, split3], [q, k, v], name=t + "qkv_split", axis=1))
        q = node("Transpose", [node("Reshape", [q, shape_heads], t + "q_r")], t + "q", perm=[1, 0, 2])  # [heads, n, hd]
        kt = node(
            "Transpose", [node("Reshape", [k, shape_heads], t + "k_r")], t + "kt", perm=[1, 2, 0]
        )  # [heads, hd, n]
        v = node("Transpose", [node("Reshape", [v, shape_heads], t + "v_r")], t + "v", perm=[1, 0, 2])
        scores = node("Mul", [node("MatMul", [q, kt], t + "att_qk"), scale], t + "att_scores")
        probs = node("Softmax", [scores], t + "att_probs", axis=-1)
        ctx = node("MatMul", [probs, v], t + "att_ctx")  # [heads, n, hd]
        ctx = node("Reshape", [node("Transpose", [ctx], t + "ctx_t", perm=[1, 0, 2]), shape_ctx], t + "ctx")
        o = node("MatMul", [ctx, weight(p + "attention.output.dense.weight", True)], t + "o_mm")
        o = node("Add", [o, weight(p + "attention.output.dense.bias")], t + "o")
        a = node(
            "LayerNormalization",
            [
                node("Add", [o, x], t + "res1"),
                weight(p + "attention.output.LayerNorm.weight"),
                weight(p + "attention.output.LayerNorm.bias"),
            ],
            t + "ln1",
            axis=-1,
            epsilon=eps,
        )
        h = node("MatMul", [a, weight(p + "intermediate.dense.weight", True)], t + "i_mm")
        h = node("Add", [h, weight(p + "intermediate.dense.bias")], t + "i")
        # exact GELU: x * 0.5 * (1 + erf(x / sqrt(2))) (the pattern ONNX Runtime fuses into one kernel)
        erf = node("Erf", [node("Mul", [h, inv_sqrt2], t + "g_div")], t + "g_erf")
        g = node("Mul", [node("Mul", [h, node("Add", [erf, one_f], t + "g_add")], t + "g_mul"), half], t + "gelu")
        o2 = node("MatMul", [g, weight(p + "output.dense.weight", True)], t + "o2_mm")
        o2 = node("Add", [o2, weight(p + "output.dense.bias")], t + "o2")
        x = node(
            "LayerNormalization",
            [
                node("Add", [o2, a], t + "res2"),
                weight(p + "output.LayerNorm.weight"),
                weight(p + "output.LayerNorm.bias"),
            ],
            t + "ln2" if i < layers_n - 1 else "tokens",
            axis=-1,
            epsilon=eps,
        )
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["n"])]
    outputs = [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["n", hidden])]
    if readout is not None:
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["n"]))
        first = node("Gather", ["tokens", zero], "cls_row", axis=0)  # [1, hidden]
        rw = const("readout_w", np.asarray(readout[0], dtype=np.float32).reshape(hidden, 1))
        logit = node("MatMul", [first, rw], "logit_mm")
        shape1 = const("shape1", np.array([1], dtype=np.int64))
        node(
            "Add",
            [node("Reshape", [logit, shape1], "logit_r"), const("readout_b", np.asarray(readout[1], dtype=np.float32))],
            "logit",
        )
        outputs = [helper.make_tensor_value_info("logit", TensorProto.FLOAT, [1])]
    graph = helper.make_graph(
        nodes,
        "groundlens_bert" if readout is None else "groundlens_verifier",
        inputs,
        outputs,
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="groundlens")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def dense_matmuls(model: Any) -> list[str]:
    """Names of the MatMul nodes with a weight operand (the ones int8 quantisation may touch)."""
    weights = {t.name for t in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]


def attention_matmuls(model: Any) -> list[str]:
    """MatMul nodes between two activations (attention's q.k and probs.v): kept fp32."""
    dense = set(dense_matmuls(model))
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.name not in dense]
