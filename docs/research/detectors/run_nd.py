import onnxruntime as ort, numpy as np, sys, time
from PIL import Image
L=open('coco80.txt').read().split('\n')
s=ort.InferenceSession('models/nanodet.onnx', providers=['CPUExecutionProvider'])
so=ort.SessionOptions(); 
iname=s.get_inputs()[0].name; S=416
mode=sys.argv[1]
def nms(b,sc,thr=0.5):
    idx=np.argsort(-sc); keep=[]
    while len(idx):
        i=idx[0]; keep.append(i)
        xx1=np.maximum(b[i,0],b[idx[1:],0]); yy1=np.maximum(b[i,1],b[idx[1:],1]); xx2=np.minimum(b[i,2],b[idx[1:],2]); yy2=np.minimum(b[i,3],b[idx[1:],3])
        inter=np.clip(xx2-xx1,0,None)*np.clip(yy2-yy1,0,None)
        a=lambda k:(b[k,2]-b[k,0])*(b[k,3]-b[k,1])
        iou=inter/(a(i)+a(idx[1:])-inter+1e-9); idx=idx[1:][iou<thr]
    return keep
for f in sys.argv[2:]:
    im=Image.open(f).convert('RGB'); W,H=im.size
    x=np.asarray(im.resize((S,S),Image.BILINEAR),dtype=np.float32)
    if mode=='01': x=x/255
    elif mode=='meanstd': x=(x[...,::-1]-[103.53,116.28,123.675])/[57.375,57.12,58.395]
    x=np.ascontiguousarray(x.transpose(2,0,1)[None],dtype=np.float32)
    t=time.time(); outs=s.run(None,{iname:x}); dt=time.time()-t
    B=[];SC=[];C=[]
    for n in (52,26,13):
        stride=S//n
        cls=[o[0] for o in outs if o.shape[1]==n*n and o.shape[2]==80][0]
        reg=[o[0] for o in outs if o.shape[1]==n*n and o.shape[2]==44][0].reshape(-1,4,11)
        e=np.exp(reg-reg.max(-1,keepdims=True)); p=e/e.sum(-1,keepdims=True); d=(p*np.arange(11)).sum(-1)*stride
        ys,xs=np.divmod(np.arange(n*n),n); cx=xs*stride; cy=ys*stride  # nanodet uses top-left of cell
        c=cls.argmax(1); sc=cls.max(1); m=sc>0.3
        bb=np.stack([cx-d[:,0],cy-d[:,1],cx+d[:,2],cy+d[:,3]],1)
        B.append(bb[m]);SC.append(sc[m]);C.append(c[m])
    B=np.concatenate(B);SC=np.concatenate(SC);C=np.concatenate(C)
    out=[]
    for k in (nms(B,SC) if len(SC) else []):
        b=B[k]; out.append((L[C[k]],round(float(SC[k]),2),[int(b[0]*W/S),int(b[1]*H/S),int(b[2]*W/S),int(b[3]*H/S)]))
    print(f.split('/')[-1], f'{dt*1000:.0f}ms', 'max', round(float(max(o[0].max() for o in outs if o.shape[2]==80)),2), out[:8])
