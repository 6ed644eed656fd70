import tract, numpy as np, sys, time
from PIL import Image
def anchors_short():
    a=[]
    for n,k in ((16,2),(8,6)):
        for y in range(n):
            for x in range(n):
                for _ in range(k): a.append(((x+0.5)/n,(y+0.5)/n))
    return np.array(a)
def anchors_full():
    return np.array([((x+0.5)/48,(y+0.5)/48) for y in range(48) for x in range(48)])
cfg={'short':('models/face_detection_short_range.onnx',128,anchors_short()),'full':('models/face_detection_full_range.onnx',192,anchors_full())}
which=sys.argv[1]; path,S,A=cfg[which]
tm=tract.onnx().load(path); tm.set_input_fact(0,f"1,{S},{S},3,f32"); r=tm.into_model().into_runnable()
def nms(b,sc,thr=0.3):
    idx=np.argsort(-sc); keep=[]
    while len(idx):
        i=idx[0]; keep.append(i)
        xx1=np.maximum(b[i,0],b[idx[1:],0]); yy1=np.maximum(b[i,1],b[idx[1:],1]); xx2=np.minimum(b[i,2],b[idx[1:],2]); yy2=np.minimum(b[i,3],b[idx[1:],3])
        inter=np.clip(xx2-xx1,0,None)*np.clip(yy2-yy1,0,None); ar=lambda k:(b[k,2]-b[k,0])*(b[k,3]-b[k,1])
        idx=idx[1:][inter/(ar(i)+ar(idx[1:])-inter+1e-9)<thr]
    return keep
for f in sys.argv[2:]:
    im=Image.open(f).convert('RGB'); W,H=im.size
    # letterbox to square to keep aspect
    side=max(W,H); canvas=Image.new('RGB',(side,side)); canvas.paste(im,(0,0))
    x=(np.asarray(canvas.resize((S,S),Image.BILINEAR),dtype=np.float32)/127.5-1)[None]
    t=time.time(); outs=[o.to_numpy() for o in r.run([x])]; dt=time.time()-t
    reg=[o for o in outs if o.shape[-1]==16][0][0]; cls=[o for o in outs if o.shape[-1]==1][0][0,:,0]
    sc=1/(1+np.exp(-np.clip(cls,-100,100))); m=sc>0.5
    cx=reg[:,0]/S+A[:,0]; cy=reg[:,1]/S+A[:,1]; w=reg[:,2]/S; h=reg[:,3]/S
    B=np.stack([cx-w/2,cy-h/2,cx+w/2,cy+h/2],1)[m]*side; s=sc[m]
    out=[(round(float(s[k]),2),[int(v) for v in B[k]]) for k in (nms(B,s) if len(s) else [])]
    print(f.split('/')[-1], f'{dt*1000:.1f}ms', len(out), out[:6])
