#!/usr/bin/env python3
"""Oracle for furlong's TensorBoard writer (src/metrics/tensorboard.cpp): reads a log directory
with TensorBoard's own reader and dumps what it understood.

Usage: read_tensorboard.py LOG_DIR OUT_JSON

OUT_JSON = {
  "files": [event file names TensorBoard would load],
  "scalars": {tag: [[step, value, wall_time], ...]},     (non-finite values as null; EventAccumulator, size guidance 0 =
                                                          keep every event)
  "records": n, "crc_ok": bool, "file_version": str     (the first file re-read record by record
                                                          with TensorBoard's PyRecordReader, which
                                                          checks both masked CRC32Cs, and parsed
                                                          with TensorBoard's Event proto)
  "masked_crc32c_123456789": int                         (TensorBoard's masked_crc32c of b"123456789")
}
"""
import glob
import json
import math
import os
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow


def read_records(path):
    reader = pywrap_tensorflow.PyRecordReader_New(path.encode())
    records, crc_ok = [], True
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        except errors.DataLossError:
            crc_ok = False
            break
        records.append(reader.record())
    return records, crc_ok


def finite_or_none(value):
    """JSON has no NaN/inf: those come back as null."""
    return value if math.isfinite(value) else None


def main():
    log_dir, out_path = sys.argv[1], sys.argv[2]
    acc = event_accumulator.EventAccumulator(log_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    scalars = {tag: [[e.step, finite_or_none(e.value), e.wall_time] for e in acc.Scalars(tag)]
               for tag in acc.Tags()["scalars"]}
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(log_dir, "*tfevents*")))
    records, crc_ok = read_records(os.path.join(log_dir, files[0]))
    first = event_pb2.Event.FromString(records[0]) if records else event_pb2.Event()
    out = {"files": files, "scalars": scalars, "records": len(records), "crc_ok": crc_ok,
           "file_version": first.file_version,
           "masked_crc32c_123456789": pywrap_tensorflow.masked_crc32c(b"123456789")}
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
