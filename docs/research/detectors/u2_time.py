import tract, onnxruntime as ort, numpy as np, time
so=ort.SessionOptions(); so.intra_op_num_threads=1; so.inter_op_num_threads=1
s=ort.InferenceSession('models/u2netp_dyn.onnx', so, providers=['CPUExecutionProvider'])
for S in (320,192,160,128):
    x=np.random.rand(1,3,S,S).astype(np.float32)
    s.run(None,{'input.1':x}); t=time.time(); s.run(None,{'input.1':x}); o=time.time()-t
    m=tract.onnx().load('models/u2netp_dyn.onnx'); m.set_input_fact(0,f"1,3,{S},{S},f32")
    for i in range(m.output_count()): m.set_output_fact(i, None)
    r=m.into_model().into_runnable(); r.run([x]); t=time.time(); r.run([x]); tt=time.time()-t
    print(S, 'ort1thread %.0fms'%(o*1000), 'tract %.0fms'%(tt*1000))
