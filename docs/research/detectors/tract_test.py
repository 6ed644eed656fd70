import tract, numpy as np, time, sys, os
os.environ.setdefault('RAYON_NUM_THREADS','1')
cases = {
 'models/centernet.onnx': (1,512,512,3),
 'models/nanodet.onnx': (1,3,416,416),
 'models/face_detection_front_128x128_barracuda.onnx': (1,128,128,3),
 'models/face_detection_back_256x256_barracuda.onnx': (1,256,256,3),
 'models/320n.onnx': (1,3,320,320),
 'models/u2netp.onnx': (1,3,320,320),
 'models/face_detection_short_range.onnx': (1,128,128,3),
 'models/face_detection_full_range.onnx': (1,192,192,3),
 'models/selfie_segmentation.onnx': (1,256,256,3),
}
for p in sys.argv[1:] or cases:
    shp = cases[p]
    try:
        t=time.time()
        m = tract.onnx().load(p)
        m.set_input_fact(0, f"{','.join(map(str,shp))},f32")
        m = m.into_model().into_runnable()
        lt=time.time()-t
        x = (np.random.rand(*shp)*255).astype(np.float32)
        m.run([x]); ts=[]
        for _ in range(3):
            t=time.time(); out=m.run([x]); ts.append(time.time()-t)
        print(p, 'OK load %.1fs'%lt, 'run ms min %.0f'%(min(ts)*1000), [o.to_numpy().shape for o in out])
    except Exception as e:
        print(p, 'FAIL', repr(e)[:600])
