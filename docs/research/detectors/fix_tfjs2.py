# fill attrs that newer TF op defs require (defaults) into a tfjs graph-model json
import json, sys, os, shutil
from tensorflow.python.framework import op_def_registry
from google.protobuf import json_format
src, dst = sys.argv[1], sys.argv[2]
m = json.load(open(src))
def fix(nodes):
    for n in nodes:
        n.setdefault('attr', {})
        if n['op'] in ('_FusedConv2D', 'FusedDepthwiseConv2dNative', '_FusedMatMul'):
            k = int(n['attr'].get('num_args', {}).get('i', len(n['input']) - 2))
            n['attr']['TArgs'] = {'list': {'type': ['DT_FLOAT'] * k}}
        od = op_def_registry.get(n['op'])
        if od is None: continue
        for a in od.attr:
            if a.name not in n['attr'] and a.HasField('default_value'):
                n['attr'][a.name] = json.loads(json_format.MessageToJson(a.default_value))
fix(m['modelTopology']['node'])
for f in m['modelTopology'].get('library', {}).get('function', []):
    fix(f.get('nodeDef', []))
json.dump(m, open(dst, 'w'))
for g in m['weightsManifest']:
    for p in g['paths']:
        shutil.copy(os.path.join(os.path.dirname(src), p), os.path.join(os.path.dirname(dst), p))
