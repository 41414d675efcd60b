"""The Huawei Ascend backends: `ascend` (ONNX -> ATC -> .om, run through pyACL) and `npu-emulate`
(the npu's exact graph run on this CPU by TVM, so the npu path's numerics are tested without a
card). The export to what ATC takes (opset, static shapes, CANN's operator list) is shared."""
