import numpy as np, sys, runpy
for a,b in [('product','prod'),('cast',None),('bool','bool_'),('object','object_')]:
    if b and not hasattr(np,a): setattr(np,a,getattr(np,b))
if not hasattr(np,'bool'): np.bool=np.bool_
sys.argv=['tf2onnx.convert']+sys.argv[1:]
runpy.run_module('tf2onnx.convert', run_name='__main__')
