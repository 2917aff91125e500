// Real data for training and evaluation: arrays of samples read from files, a data set of
// arrays with one sample count, and the order batches take them in.
//
// Formats:
// - IDX (the MNIST family: `train-images-idx3-ubyte`, ...), gzipped or not: a big-endian
//   header (two zero bytes, a type byte, the rank, then each dimension as a 32-bit integer)
//   and the elements, big-endian. Types u8, i8, i16, i32, f32, f64.
// - NumPy `.npy` (versions 1 to 3), C order, little-endian or single-byte dtypes
//   (u1, i1, i2, i4, i8, f4, f8, b1).
// - ONNX TensorProto (`.pb`), as ONNX's backend tests keep their inputs and outputs.
// - safetensors (`.safetensors`): a file of named tensors, each an array (F16, BF16 widened
//   to F32; U16 to I32; U32, U64 to I64; BOOL as U8). `FILE.safetensors:KEY` names one.
//
// The first dimension of every array counts samples. Arrays are held in memory as read
// (a byte per pixel for MNIST); batches copy only the elements a worker's tile needs.
#ifndef TOFU_RUNTIME_DATASET_H
#define TOFU_RUNTIME_DATASET_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "analysis/strategy.h"
#include "support/element_type.h"
#include "support/errors.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// An array of samples, row-major, in its file's element type.
struct DataArray {
  std::string path;           ///< the file it came from (for messages)
  std::vector<int64_t> shape; ///< shape[0] samples; rank >= 1
  /// uint8 (bool too), int8 to int64, float32 or float64; the other types widen.
  ElementType type = ElementType::UInt8;
  std::vector<unsigned char> bytes; ///< native byte order
  /// The element type the file stores, as an ONNX TensorProto code (FLOAT = 1, UINT16 = 4,
  /// BOOL = 9, FLOAT16 = 10, ...), whatever `type` holds it in; 0 for an array made here.
  int onnxType = 0;

  int64_t samples() const { return shape.empty() ? 0 : shape[0]; }
  /// Elements of one sample (the product of shape[1:]).
  int64_t sampleElements() const;
  bool integral() const { return type != ElementType::Float32 && type != ElementType::Float64; }
  /// Element `flat` (row-major over the whole array).
  double at(int64_t flat) const;
};

/// The uint16 values of `a` (an ONNX .pb file's, which DataArray holds as int32) read as
/// bfloat16 bit patterns, to float32: ONNX 1.12 wrote bfloat16 arrays as uint16
/// (numpy has no bfloat16), so a test's input for a bfloat16 input is stored so.
void bfloat16FromBits(DataArray &a);

/// Reads an IDX file (gzipped when its name ends in .gz), a .npy file, an ONNX TensorProto
/// (.pb, as ONNX's tests store their inputs and outputs) or a tensor of a safetensors file
/// (`FILE.safetensors:KEY`, or `FILE.safetensors` holding one tensor), by its extension.
/// Errors name the file and what is wrong (a bad magic number, a truncated body, a
/// Fortran-order or big-endian array, sizes past kMaxGraphBytes).
llvm::Expected<DataArray> readDataArray(const std::string &path);
/// The same from bytes already read and inflated (`name` stands for the file in messages).
llvm::Expected<DataArray> parseIdx(const std::string &bytes, const std::string &name);
llvm::Expected<DataArray> parseNpy(const std::string &bytes, const std::string &name);
/// A serialised onnx.TensorProto: float, double, int8 to int64, uint8 and bool elements,
/// raw or in the typed fields (data held in an external file is refused).
llvm::Expected<DataArray> parseTensorProto(const std::string &bytes, const std::string &name);

/// Writes a float32 array of `shape` as a .npy file (version 1, C order). Errors name the
/// file.
llvm::Error writeNpy(const std::string &path, const std::vector<int64_t> &shape,
                     const std::vector<float> &values);

/// Writes `values` as a .npy array of the graph's element type `dtype`: int8 to int64 and
/// uint8 as those integers (each value rounded to the nearest, saturated to the type),
/// bool as numpy's bool (nonzero is true), float64 as doubles, and any other type
/// (float32, float16, bfloat16) as float32. Errors name the file.
llvm::Error writeNpyAs(const std::string &path, const std::vector<int64_t> &shape,
                       const std::vector<double> &values, ElementType dtype);

/// Named arrays with one sample count.
struct DataSet {
  std::string description; ///< where it came from, for the run's header
  std::vector<std::pair<std::string, DataArray>> arrays;
  int64_t samples = 0;

  const DataArray *find(const std::string &name) const;
};

/// Opens a data set from `spec`:
/// - a directory of the MNIST family: `<split>-images-idx3-ubyte[.gz]` and
///   `<split>-labels-idx1-ubyte[.gz]`, as arrays `images` and `labels`; `split` is `train`
///   or `t10k` (the test split);
/// - a `.safetensors` file: each of its tensors an array named by its key (`split` is
///   ignored);
/// - `NAME=FILE[,NAME=FILE...]`: each file (IDX, .npy, .pb or FILE.safetensors[:KEY]) as the
///   array NAME (`split` is ignored).
/// Every array must have the same number of samples (errors name both files). A spec that
/// is none of these is refused naming the setting as `names` spells "data".
llvm::Expected<DataSet> openDataSet(const std::string &spec, const std::string &split,
                                    const SettingNames &names = {});

/// Whether `spec` names a directory of the MNIST family with a `split` split.
bool hasMnistSplit(const std::string &dir, const std::string &split);

/// The order of the samples in epoch `epoch` (from 0): a permutation of [0, n) drawn by a
/// Fisher–Yates shuffle, i from n - 1 down to 1 swapping i with j = r mod (i + 1), r the
/// next output of SplitMix64 started at seed * 2^32 + epoch. Written down so that a peer
/// (tools/main/fmnist.py) takes the same batches: the stream's state advances by
/// 0x9E3779B97F4A7C15 before each output, which is the state mixed by
/// (x ^ x >> 30) * 0xBF58476D1CE4E5B9, (x ^ x >> 27) * 0x94D049BB133111EB, x ^ x >> 31.
std::vector<int64_t> epochOrder(int64_t n, uint64_t seed, uint64_t epoch);

/// How values from an array become an input's values: integral arrays are first divided by
/// `scale` (255 for bytes: pixels to [0, 1]; 1 otherwise), then (x - mean) / std.
struct Normalization {
  double mean = 0, std = 1;
};

/// Writes `box`'s elements of a batch input of shape `shape` (shape[0] the batch) into `out`
/// (row-major over the box): batch row r is sample `samples[r]` of `array`, whose sample
/// holds as many elements as the input's row (its shape may differ: 28x28 feeds 1x28x28).
/// `raw`: the values as they are (labels: no scaling or normalisation).
void fillBatch(const DataArray &array, const std::vector<int64_t> &samples,
               const std::vector<int64_t> &shape, const Box &box, bool raw,
               const Normalization &norm, float *out);

} // namespace tofu

#endif // TOFU_RUNTIME_DATASET_H
