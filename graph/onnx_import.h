// ONNX import: a real .onnx file (weights included or not) to a dataflow graph.
#ifndef TOFU_GRAPH_ONNX_IMPORT_H
#define TOFU_GRAPH_ONNX_IMPORT_H

#include <map>
#include <set>
#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "graph/graph.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// A graph input's value given ahead of the import (`tofu-run --infer --input`).
struct OnnxGivenInput {
  /// Its shape: it replaces the declared one, fixing the input's dynamic dimensions (the
  /// declared static ones must agree).
  std::vector<int64_t> shape;
  /// Its values (row-major), where the caller read them: an op that needs this input as a
  /// constant (a shape, axes, starts, a diagonal offset) takes them. Empty: not known.
  std::vector<double> values;
  bool hasValues = false;
  /// The element type the value's file stores (an ONNX TensorProto code), 0 when not known:
  /// it must be the type the model declares (as ONNX Runtime, the import converts none), but
  /// for uint16 given for bfloat16 (the bits, as ONNX 1.12's test files store them).
  int32_t elementType = 0;
};

struct OnnxImportOptions {
  /// Substituted for every symbolic dimension (a dynamic batch).
  int64_t batch = 1;
  /// The user chose `batch`: a model without symbolic dimensions is then an error unless
  /// its first data input's leading extent is that batch.
  bool batchExact = false;
  /// When weights are exported as graph inputs (export_params=False), the first this many
  /// graph inputs are data and the rest are weights.
  unsigned dataInputs = 1;
  /// dataInputs was given by the user: more than the model's graph inputs is an error
  /// (else it means "all of them").
  bool dataInputsExact = false;
  /// The folder an initializer's external data (`location`) is read from, and confined to:
  /// importOnnx sets it to the folder the model file is in (links
  /// followed). Empty: a model with external data is refused.
  std::string modelDir;
  /// Graph inputs given ahead, by name: each must be a graph input that is not an
  /// initializer, and is a data input whatever dataInputs says.
  std::map<std::string, OnnxGivenInput> givenInputs;
  /// The shape of one sample of the data that will feed a graph input, by input name ("":
  /// the first data input): the input's dynamic dimensions after the first (a sequence's
  /// length) take the sample's extents where the ranks agree (the input's rank is the
  /// sample's plus the batch axis). Other dynamic dimensions are `batch`.
  std::map<std::string, std::vector<int64_t>> sampleShapes;
  /// Float initializers to train whatever the rule below says, and to keep constant. By
  /// default every float initializer is a weight (trained) except a constant: one holding
  /// a value that is not finite (a causal mask's -inf), or an anonymous one of one element
  /// (a name PyTorch gave a value it computed at export, `onnx::Div_12`: a scale, an
  /// exponent). Each name must be a float initializer of the model.
  std::set<std::string> trainable, frozen;
};

/// Reads the model at `path` (with its initializers' external data, from files in the
/// model's folder and nowhere else), infers shapes with ONNX's shape inference, and translates
/// its nodes into library ops. An operator the importer does not translate is an error
/// naming the node, its operator and, from ops/onnx_mapping.json's reasoning, why.
/// The resulting graph is checked: the library's shape clauses must agree with ONNX's.
llvm::Expected<Graph> importOnnx(const std::string &path, const OpLibrary &lib,
                                 const OnnxImportOptions &options = {});

/// What saveOnnxWithValues wrote.
struct OnnxSaveReport {
  unsigned replaced = 0;     ///< initializers given trained values
  int64_t bytes = 0;         ///< of every initializer
  bool externalData = false; ///< the larger initializers lie in `dataFile`
  std::string dataFile;
  int64_t externalBytes = 0;
};

/// Writes the ONNX model `in` to `out` with every initializer that `values` names (a
/// trained model's weights and running statistics, whole) replaced by those values, in the
/// initializer's own element type (float, double, float16, bfloat16); the rest of the model
/// as it was (its external data read in). With `external`, or past what protobuf can hold
/// (2 GiB), initializers of 1 KiB or more go to `out`.data beside it (ONNX's external
/// data). Both files are written whole, then renamed into place. Errors name an
/// initializer whose shape differs from its value's.
llvm::Expected<OnnxSaveReport> saveOnnxWithValues(const std::string &in, const std::string &out,
                                                  const std::map<std::string, Tensor> &values,
                                                  bool external = false);

/// Builds once what every import in this process reads: `lib`'s translation table and
/// ONNX's operator schemas. A process that forks importers (tofu-run --batch) calls it
/// before forking, so that each child finds them built.
llvm::Error prepareOnnxImport(const OpLibrary &lib);

/// The same for a model held in memory (a framework's export); `name` stands for the file
/// in messages.
llvm::Expected<Graph> importOnnxBytes(const std::string &bytes, const std::string &name,
                                      const OpLibrary &lib, const OnnxImportOptions &options = {});

} // namespace tofu

#endif // TOFU_GRAPH_ONNX_IMPORT_H
