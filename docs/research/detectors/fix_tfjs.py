import json, sys, shutil, os
src, dst = sys.argv[1], sys.argv[2]
m = json.load(open(src))
def fix(nodes):
    for n in nodes:
        if n['op'] in ('_FusedConv2D', 'FusedDepthwiseConv2dNative', '_FusedMatMul'):
            k = int(n['attr'].get('num_args', {}).get('i', len(n['input']) - 2))
            n['attr']['TArgs'] = {'list': {'type': ['DT_FLOAT'] * k}}
            n['attr'].setdefault('num_host_args', {'i': '0'})
fix(m['modelTopology']['node'])
for f in m['modelTopology'].get('library', {}).get('function', []):
    fix(f.get('nodeDef', []))
json.dump(m, open(dst, 'w'))
for g in m['weightsManifest']:
    for p in g['paths']:
        shutil.copy(os.path.join(os.path.dirname(src), p), os.path.join(os.path.dirname(dst), p))
