import onnx, sys, collections
for p in sys.argv[1:]:
    m = onnx.load(p)
    g = m.graph
    print("=====", p)
    print("ir", m.ir_version, "opsets", [(o.domain, o.version) for o in m.opset_import], "producer", m.producer_name, m.producer_version)
    inits = {i.name for i in g.initializer}
    def shp(v):
        return [d.dim_value if d.HasField('dim_value') else d.dim_param for d in v.type.tensor_type.shape.dim]
    for i in g.input:
        if i.name not in inits: print(" input", i.name, shp(i), i.type.tensor_type.elem_type)
    for o in g.output: print(" output", o.name, shp(o), o.type.tensor_type.elem_type)
    c = collections.Counter(n.op_type for n in g.node)
    print(" nodes", len(g.node), dict(sorted(c.items())))
    if m.metadata_props: print(" meta", {p.key: p.value[:300] for p in m.metadata_props})
