import onnxruntime as ort, numpy as np, sys, time
from PIL import Image
L=open('coco80.txt').read().split('\n')
s=ort.InferenceSession('models/centernet.onnx', providers=['CPUExecutionProvider'])
iname=s.get_inputs()[0].name
mode=sys.argv[1]
for f in sys.argv[2:]:
    im=Image.open(f).convert('RGB'); W,H=im.size
    x=np.asarray(im.resize((512,512),Image.BILINEAR),dtype=np.float32)[None]
    if mode=='01': x=x/255
    if mode=='pm1': x=x/127.5-1
    t=time.time(); det=s.run(['tower_0/detections'],{iname:x})[0][0]; dt=time.time()-t
    out=[(L[int(c)] if int(c)<len(L) else c, round(float(sc),2), [int(v) for v in (x1*W/512,y1*H/512,x2*W/512,y2*H/512)]) for x1,y1,x2,y2,sc,c in det if sc>0.25]
    print(f.split('/')[-1], f'{dt*1000:.0f}ms', out[:8])
