"""The verifier's head as an ONNX graph, written from its weights, run on ONNX Runtime.

Why: the head runs once per response sentence on the scoring worker, beside the embedding pass it
reads from. ONNX Runtime's kernels on one intra-op thread are fast and give the same bits for the
same unit, whatever else the process does; :class:`~groundlens_core.verifier.head.Head` (numpy,
float64) is the reference the tests hold it to. The graph is small (one layer), so it is built in
memory when the verifier loads, never cached on disk.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from groundlens_core.verifier.head import HEADS, LN_EPS, PARAMETERS

OPSET = 17


def build_head_model(tensors: Mapping[str, np.ndarray]) -> Any:
    """The ``onnx.ModelProto`` of the head: inputs ``states`` float32 ``[n, d]``, ``segments`` and
    ``matches`` int64 ``[n]``; output ``logit`` float32 ``[1]``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    missing = [k for k in PARAMETERS if k not in tensors]
    if missing:
        raise ValueError(f"verifier weights lack {', '.join(missing)}")
    w = {k: np.asarray(tensors[k], dtype=np.float32) for k in PARAMETERS}
    d = w["cls"].shape[0]
    hd = d // HEADS
    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def dense(x: str, name: str) -> str:
        mm = node("MatMul", [x, const(name + ".wt", w[name + ".weight"].T)], name + "_mm")
        return node("Add", [mm, const(name + ".b", w[name + ".bias"])], name + "_out")

    def layer_norm(x: str, name: str) -> str:
        return node(
            "LayerNormalization",
            [x, const(name + ".w", w[name + ".weight"]), const(name + ".b", w[name + ".bias"])],
            name + "_out",
            axis=-1,
            epsilon=LN_EPS,
        )

    shape_heads = const("shape_heads", np.array([-1, HEADS, hd], dtype=np.int64))
    shape_ctx = const("shape_ctx", np.array([-1, d], dtype=np.int64))
    x = node("Add", ["states", node("Gather", [const("segment", w["segment"]), "segments"], "seg")], "x_seg")
    x = node("Add", [x, node("Gather", [const("match", w["match"]), "matches"], "mat")], "x_in")
    x = node("Concat", [const("cls", w["cls"][None, :]), x], "x_cls", axis=0)
    x = layer_norm(x, "ln0")

    def heads(name: str, perm: list[int]) -> str:
        return node("Transpose", [node("Reshape", [dense(x, name), shape_heads], name + "_r")], name + "_t", perm=perm)

    q, kt, v = heads("attn.q", [1, 0, 2]), heads("attn.k", [1, 2, 0]), heads("attn.v", [1, 0, 2])
    scale = const("scale", np.array(1.0 / math.sqrt(hd), dtype=np.float32))
    probs = node("Softmax", [node("Mul", [node("MatMul", [q, kt], "qk"), scale], "scores")], "probs", axis=-1)
    ctx = node("MatMul", [probs, v], "ctx_h")
    ctx = node("Reshape", [node("Transpose", [ctx], "ctx_t", perm=[1, 0, 2]), shape_ctx], "ctx")
    x = layer_norm(node("Add", [x, dense(ctx, "attn.out")], "res1"), "ln1")
    h = dense(x, "ffn.in")
    # GELU, tanh form: 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))
    cube = node("Mul", [node("Mul", [h, h], "h2"), h], "h3")
    inner = node("Add", [h, node("Mul", [cube, const("c044", np.array(0.044715, dtype=np.float32))], "h3c")], "hin")
    t = node(
        "Tanh", [node("Mul", [inner, const("c_s2pi", np.array(math.sqrt(2 / math.pi), dtype=np.float32))], "hs")], "ht"
    )
    g = node(
        "Mul",
        [
            node("Mul", [h, node("Add", [t, const("one", np.array(1.0, dtype=np.float32))], "t1")], "hg"),
            const("half", np.array(0.5, dtype=np.float32)),
        ],
        "gelu",
    )
    x = layer_norm(node("Add", [x, dense(g, "ffn.out")], "res2"), "ln2")
    first = node("Gather", [x, const("zero", np.array([0], dtype=np.int64))], "first", axis=0)  # [1, d]
    logit = node("MatMul", [first, const("readout.wt", w["readout.weight"][:, None])], "logit_mm")  # [1, 1]
    logit = node(
        "Add",
        [
            node("Reshape", [logit, const("shape1", np.array([1], dtype=np.int64))], "logit_r"),
            const("readout.b", w["readout.bias"]),
        ],
        "logit",
    )
    graph = helper.make_graph(
        nodes,
        "groundlens_verifier_head",
        [
            helper.make_tensor_value_info("states", TensorProto.FLOAT, ["n", d]),
            helper.make_tensor_value_info("segments", TensorProto.INT64, ["n"]),
            helper.make_tensor_value_info("matches", TensorProto.INT64, ["n"]),
        ],
        [helper.make_tensor_value_info("logit", TensorProto.FLOAT, [1])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="groundlens")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


class OnnxHead:
    """The head on ONNX Runtime: one unit per run, one intra-op thread, deterministic kernels."""

    def __init__(self, tensors: Mapping[str, np.ndarray]):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.use_deterministic_compute = True
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        data = build_head_model(tensors).SerializeToString()
        self._session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])

    def logit(self, states: np.ndarray, segments: np.ndarray, matches: np.ndarray) -> float:
        out = self._session.run(
            None,
            {
                "states": np.ascontiguousarray(states, dtype=np.float32),
                "segments": np.asarray(segments, dtype=np.int64),
                "matches": np.asarray(matches, dtype=np.int64),
            },
        )[0]
        return float(out[0])
