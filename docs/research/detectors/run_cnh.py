import onnxruntime as ort, numpy as np, sys, time, tract
from PIL import Image
L=open('coco80.txt').read().split('\n')
so=ort.SessionOptions(); so.intra_op_num_threads=1
s=ort.InferenceSession('models/centernet_heads.onnx', so, providers=['CPUExecutionProvider'])
S=int(sys.argv[1]); use_tract = sys.argv[2]=='tract'
if use_tract:
    tm=tract.onnx().load('models/centernet_heads.onnx'); tm.set_input_fact(0,f"1,{S},{S},3,f32")
    for i in range(tm.output_count()): tm.set_output_fact(i,None)
    tr=tm.into_model().into_runnable()
def maxpool3(h):
    p=np.pad(h,((1,1),(1,1),(0,0)),constant_values=-1)
    return np.max([p[i:i+h.shape[0],j:j+h.shape[1]] for i in range(3) for j in range(3)],0)
ANIMALS={'bird','cat','dog','horse','sheep','cow','elephant','bear','zebra','giraffe','teddy bear'}
for f in sys.argv[3:]:
    im=Image.open(f).convert('RGB'); W,H=im.size
    x=np.asarray(im.resize((S,S),Image.BILINEAR),dtype=np.float32)[None]
    t=time.time()
    if use_tract: kp,wh=[o.to_numpy() for o in tr.run([x])]
    else: kp,wh=s.run(['tower_0/keypoints','tower_0/wh'],{'tower_0/images:0':x})
    dt=time.time()-t
    kp=kp[0]; wh=wh[0]; peaks=kp*(kp==maxpool3(kp))
    flat=peaks.ravel(); idx=np.argsort(-flat)[:100]; out=[]
    for k in idx:
        sc=flat[k]
        if sc<0.25: break
        cls=k%80; cell=k//80; cy,cx=divmod(cell,kp.shape[1])
        l,tp,r,b=wh[cy,cx]
        x1,y1,x2,y2=cx*4-l,cy*4-tp,cx*4+r,cy*4+b
        out.append((L[cls],round(float(sc),2),[int(x1*W/S),int(y1*H/S),int(x2*W/S),int(y2*H/S)]))
    print(f.split('/')[-1], f'{dt*1000:.0f}ms', out[:6])
