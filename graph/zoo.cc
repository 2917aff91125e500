// Model zoo builders.
#include "graph/zoo.h"

#include <algorithm>

#include "analysis/checked.h"
#include "fmt/format.h"

namespace tofu {
namespace {

/// Small helper that names tensors and nodes and collects the first error.
class Builder {
public:
  std::string tensor(const std::string &name, std::vector<int64_t> shape, TensorRole role,
                     const std::string &group = "") {
    TensorInfo t;
    t.name = name;
    t.group = group.empty() ? name : group;
    t.shape = std::move(shape);
    t.shapeKnown = true;
    t.role = role;
    keep(g.addTensor(std::move(t)));
    return name;
  }
  std::string node(const std::string &name, const std::string &op, std::vector<std::string> inputs,
                   std::map<std::string, int64_t> attrs = {},
                   std::map<std::string, int64_t> groups = {}, const std::string &group = "",
                   const std::string &coalesce = "") {
    Node n;
    n.name = name;
    n.group = group.empty() ? name : group;
    n.coalesce = coalesce;
    n.op = op;
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    n.groups = std::move(groups);
    n.output = name + "_out";
    std::string out = n.output;
    TensorInfo t;
    t.name = out;
    t.group = out;
    keep(g.addTensor(std::move(t)));
    keep(g.addNode(std::move(n)));
    return out;
  }
  llvm::Expected<Graph> finish(const std::string &loss) {
    g.outputs = {loss};
    if (error)
      return std::move(error);
    return llvm::Expected<Graph>(std::move(g));
  }

  Graph g;

private:
  void keep(llvm::Error e) {
    if (e && !error)
      error = std::move(e);
    else
      llvm::consumeError(std::move(e));
  }
  llvm::Error error = llvm::Error::success();
};

} // namespace

llvm::Expected<Graph> buildMlp(const std::vector<int64_t> &dims, int64_t batch) {
  if (dims.size() < 2)
    return stringError("an MLP needs at least an input and an output size");
  Builder b;
  std::string x = b.tensor("x", {batch, dims[0]}, TensorRole::Input);
  std::string labels = b.tensor("labels", {batch}, TensorRole::Input);
  for (size_t l = 1; l < dims.size(); ++l) {
    std::string w = b.tensor(fmt::format("fc{}_w", l), {dims[l - 1], dims[l]}, TensorRole::Weight);
    std::string bias = b.tensor(fmt::format("fc{}_b", l), {dims[l]}, TensorRole::Weight);
    x = b.node(fmt::format("fc{}", l), "MatMul", {x, w});
    x = b.node(fmt::format("fc{}_bias", l), "AddBcast", {x, bias}, {}, {{"p", 1}, {"i", 1}});
    if (l + 1 < dims.size())
      x = b.node(fmt::format("relu{}", l), "Relu", {x});
  }
  b.node("loss", "softmax_cross_entropy", {x, labels});
  return b.finish("loss_out");
}

llvm::Expected<Graph> buildWResNet(int depth, int64_t widen, int64_t batch, int64_t image,
                                   int64_t base, int64_t classes) {
  std::vector<int> blocks;
  if (depth == 50)
    blocks = {3, 4, 6, 3};
  else if (depth == 101)
    blocks = {3, 4, 23, 3};
  else if (depth == 152)
    blocks = {3, 8, 36, 3};
  else
    return stringError(fmt::format("WResNet depth {} is not one of 50, 101, 152", depth));
  if (widen < 1 || batch < 1)
    return stringError("WResNet needs a widening factor and a batch size of at least 1");
  if (image < 32 || base < 1 || classes < 1)
    return stringError("WResNet needs images of at least 32x32 (five halvings), a base width "
                       "and a class count of at least 1");
  Builder b;
  std::string eps = b.tensor("bn_eps", {}, TensorRole::Input);
  std::string labels = b.tensor("labels", {batch}, TensorRole::Input);
  std::string x = b.tensor("image", {batch, 3, image, image}, TensorRole::Input);
  auto conv = [&](const std::string &name, const std::string &in, int64_t cin, int64_t cout,
                  int64_t k, int64_t stride, int64_t pad) {
    std::string w = b.tensor(name + "_w", {cout, cin, k, k}, TensorRole::Weight);
    return b.node(
        name, "Conv2d", {in, w},
        {{"sh", stride}, {"sw", stride}, {"ph", pad}, {"pw", pad}, {"peh", pad}, {"pew", pad}});
  };
  auto bn = [&](const std::string &name, const std::string &in, int64_t c) {
    std::string scale = b.tensor(name + "_scale", {c}, TensorRole::Weight);
    std::string bias = b.tensor(name + "_bias", {c}, TensorRole::Weight);
    return b.node(name, "batch_norm_train", {in, scale, bias, eps}, {}, {{"s", 2}});
  };
  auto relu = [&](const std::string &name, const std::string &in) {
    return b.node(name, "Relu", {in});
  };
  int64_t c = base * widen;
  x = relu("stem_relu", bn("stem_bn", conv("stem_conv", x, 3, c, 7, 2, 3), c));
  x = b.node(
      "stem_pool", "MaxPool2d", {x},
      {{"kh", 3}, {"kw", 3}, {"sh", 2}, {"sw", 2}, {"ph", 1}, {"pw", 1}, {"peh", 1}, {"pew", 1}});
  for (int s = 0; s < 4; ++s) {
    int64_t width = (base << s) * widen, out = (4 * base << s) * widen;
    for (int blk = 0; blk < blocks[s]; ++blk) {
      std::string p = fmt::format("s{}b{}", s + 1, blk + 1);
      int64_t stride = (blk == 0 && s > 0) ? 2 : 1;
      std::string a =
          relu(p + "_relu1", bn(p + "_bn1", conv(p + "_conv1", x, c, width, 1, 1, 0), width));
      std::string m = relu(
          p + "_relu2", bn(p + "_bn2", conv(p + "_conv2", a, width, width, 3, stride, 1), width));
      std::string e = bn(p + "_bn3", conv(p + "_conv3", m, width, out, 1, 1, 0), out);
      std::string shortcut =
          blk == 0 ? bn(p + "_down_bn", conv(p + "_down", x, c, out, 1, stride, 0), out) : x;
      x = relu(p + "_relu3", b.node(p + "_add", "Add", {e, shortcut}, {}, {{"i", 4}}));
      c = out;
    }
  }
  x = b.node("pool", "GlobalAveragePool", {x});
  x = b.node("flatten", "Flatten4", {x});
  std::string fw = b.tensor("fc_w", {c, classes}, TensorRole::Weight);
  std::string fb = b.tensor("fc_b", {classes}, TensorRole::Weight);
  x = b.node("fc", "MatMul", {x, fw});
  x = b.node("fc_bias", "AddBcast", {x, fb}, {}, {{"p", 1}, {"i", 1}});
  b.node("loss", "softmax_cross_entropy", {x, labels});
  return b.finish("loss_out");
}

llvm::Expected<Graph> buildRnn(int layers, int64_t hidden, int64_t batch, int steps) {
  if (layers < 1 || hidden < 1 || batch < 1 || steps < 1)
    return stringError("an RNN needs at least one layer, hidden unit, batch element and step");
  Builder b;
  int64_t h = hidden;
  std::vector<std::string> W, R, bias, hPrev, cPrev;
  for (int l = 0; l < layers; ++l) {
    std::string g = fmt::format("lstm{}", l + 1);
    W.push_back(b.tensor(g + "_W", {4 * h, h}, TensorRole::Weight));
    R.push_back(b.tensor(g + "_R", {4 * h, h}, TensorRole::Weight));
    bias.push_back(b.tensor(g + "_b", {4 * h}, TensorRole::Weight));
    hPrev.push_back(b.tensor(g + "_h0", {batch, h}, TensorRole::Input));
    cPrev.push_back(b.tensor(g + "_c0", {batch, h}, TensorRole::Input));
  }
  std::string total;
  for (int t = 0; t < steps; ++t) {
    std::string x = b.tensor(fmt::format("x_t{}", t + 1), {batch, h}, TensorRole::Input);
    for (int l = 0; l < layers; ++l) {
      std::string cell = fmt::format("lstm{}_t{}", l + 1, t + 1); // the coarsening group
      std::string layer = fmt::format("lstm{}", l + 1);           // timesteps coalesce per layer
      std::string gates = b.node(cell + "_gates", "lstm_gates", {x, hPrev[l], W[l], R[l], bias[l]},
                                 {}, {}, cell, layer + "_gates");
      cPrev[l] = b.node(cell + "_c", "lstm_cell_c", {gates, cPrev[l]}, {}, {}, cell, layer + "_c");
      hPrev[l] = b.node(cell + "_h", "lstm_cell_h", {gates, cPrev[l]}, {}, {}, cell, layer + "_h");
      x = hPrev[l];
    }
    std::string target = b.tensor(fmt::format("target_t{}", t + 1), {batch, h}, TensorRole::Input);
    std::string loss = b.node(fmt::format("loss_t{}", t + 1), "mse", {x, target}, {}, {{"i", 2}});
    total = total.empty()
                ? loss
                : b.node(fmt::format("loss_sum_t{}", t + 1), "Add", {total, loss}, {}, {{"i", 0}});
  }
  return b.finish(total);
}

llvm::Expected<Graph> buildTransformer(int layers, int64_t hidden, int64_t heads, int64_t seq,
                                       int64_t batch, int64_t vocab) {
  if (layers < 1 || hidden < 1 || heads < 1 || seq < 1 || batch < 1 || vocab < 1)
    return stringError("a transformer needs positive sizes");
  if (hidden % heads != 0)
    return stringError(
        fmt::format("hidden size {} is not a multiple of the {} heads", hidden, heads));
  int64_t D = hidden, S = seq, B = batch, dh = hidden / heads;
  Builder b;
  std::string tokens = b.tensor("tokens", {B, S}, TensorRole::Input);
  std::string labels = b.tensor("labels", {B * S}, TensorRole::Input);
  std::string eps = b.tensor("ln_eps", {}, TensorRole::Input);
  std::string scale = b.tensor("attn_scale", {}, TensorRole::Input);     // 1/sqrt(head size)
  std::string mask = b.tensor("causal_mask", {S, S}, TensorRole::Input); // 0 or -1e9
  std::string E = b.tensor("tok_emb", {vocab, D}, TensorRole::Weight);
  std::string P = b.tensor("pos_emb", {S, D}, TensorRole::Weight);
  std::string x = b.node("embed", "Gather", {E, tokens}, {}, {{"pre", 0}, {"q", 2}, {"post", 1}});
  x = b.node("embed_pos", "AddBcast", {x, P}, {}, {{"p", 1}, {"i", 2}});
  auto ln = [&](const std::string &name, const std::string &in) {
    std::string g = b.tensor(name + "_scale", {D}, TensorRole::Weight);
    std::string bb = b.tensor(name + "_bias", {D}, TensorRole::Weight);
    return b.node(name, "LayerNormalization", {in, g, bb, eps}, {}, {{"p", 2}, {"f", 1}});
  };
  auto linear = [&](const std::string &name, const std::string &in, int64_t din, int64_t dout) {
    std::string w = b.tensor(name + "_w", {din, dout}, TensorRole::Weight);
    return b.node(name, "MatMulBcastB", {in, w}, {}, {{"b", 1}});
  };
  auto heads4 = [&](const std::string &name, const std::string &in) { // [B,S,D] -> [B,h,S,dh]
    std::string split = b.node(name + "_split", "ReshapeSplit", {in}, {{"n", dh}, {"outer", heads}},
                               {{"pre", 2}, {"post", 0}});
    return b.node(name + "_heads", "Transpose_0213", {split});
  };
  for (int l = 1; l <= layers; ++l) {
    std::string p = fmt::format("l{}", l);
    std::string h = ln(p + "_ln1", x);
    std::string q = heads4(p + "_q", linear(p + "_q", h, D, D));
    std::string k = heads4(p + "_k", linear(p + "_k", h, D, D));
    std::string v = heads4(p + "_v", linear(p + "_v", h, D, D));
    std::string kt = b.node(p + "_kT", "Transpose_0132", {k});
    std::string scores = b.node(p + "_scores", "MatMul", {q, kt}, {}, {{"b", 2}});
    scores = b.node(p + "_scaled", "MulBcast", {scores, scale}, {}, {{"p", 4}, {"i", 0}});
    scores = b.node(p + "_masked", "AddBcast", {scores, mask}, {}, {{"p", 2}, {"i", 2}});
    std::string attn = b.node(p + "_softmax", "Softmax", {scores}, {}, {{"pre", 3}, {"post", 0}});
    std::string ctx = b.node(p + "_ctx", "MatMul", {attn, v}, {}, {{"b", 2}});
    ctx = b.node(p + "_ctx_t", "Transpose_0213", {ctx});
    ctx = b.node(p + "_ctx_merge", "ReshapeMerge", {ctx}, {{"n", dh}, {"m", D}},
                 {{"pre", 2}, {"post", 0}});
    x = b.node(p + "_res1", "Add", {x, linear(p + "_o", ctx, D, D)}, {}, {{"i", 3}});
    std::string f = ln(p + "_ln2", x);
    f = linear(p + "_ff1", f, D, 4 * D);
    std::string b1 = b.tensor(p + "_ff1_b", {4 * D}, TensorRole::Weight);
    f = b.node(p + "_ff1_bias", "AddBcast", {f, b1}, {}, {{"p", 2}, {"i", 1}});
    f = b.node(p + "_ff_relu", "Relu", {f});
    f = linear(p + "_ff2", f, 4 * D, D);
    std::string b2 = b.tensor(p + "_ff2_b", {D}, TensorRole::Weight);
    f = b.node(p + "_ff2_bias", "AddBcast", {f, b2}, {}, {{"p", 2}, {"i", 1}});
    x = b.node(p + "_res2", "Add", {x, f}, {}, {{"i", 3}});
  }
  x = ln("final_ln", x);
  x = linear("lm_head", x, D, vocab);
  x = b.node("flatten_positions", "ReshapeMerge", {x}, {{"n", S}, {"m", B * S}},
             {{"pre", 0}, {"post", 1}});
  b.node("loss", "softmax_cross_entropy", {x, labels});
  return b.finish("loss_out");
}

llvm::Expected<ModelName> parseModelName(const std::string &name) {
  // Read by hand, not by std::regex: libstdc++'s matcher recurses once per character, so a
  // long name overflowed the stack.
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    size_t dash = name.find('-', at);
    parts.push_back(name.substr(at, dash == std::string::npos ? std::string::npos : dash - at));
    if (dash == std::string::npos)
      break;
    at = dash + 1;
  }
  auto unknown = [&] {
    return stringError(fmt::format("unknown model '{}'; {}", name, zooHelp()));
  };
  auto digits = [](const std::string &s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  // A number of the name, in its range; an error names the model and the field.
  auto number = [&](const std::string &text, int64_t lo, int64_t hi,
                    const char *what) -> llvm::Expected<int64_t> {
    auto v = parseInteger(text, lo, hi, what);
    if (!v)
      return stringError(fmt::format("model '{}': {}", name, llvm::toString(v.takeError())));
    return *v;
  };
  ModelName out{ModelName::Mlp, name, {}};
  auto push = [&](const std::string &text, int64_t lo, int64_t hi,
                  const char *what) -> llvm::Error {
    auto v = number(text, lo, hi, what);
    if (!v)
      return v.takeError();
    out.numbers.push_back(*v);
    return llvm::Error::success();
  };
  if (name == "mlp")
    return out;
  const std::string &family = parts[0];
  if (family == "wresnet") {
    // wresnet-D-W[-iN][-cN][-kN], the optional ones in that order.
    if (parts.size() < 3 || !digits(parts[1]) || !digits(parts[2]))
      return unknown();
    out.family = ModelName::WResNet;
    if (llvm::Error e = push(parts[1], 1, 1000, "the depth"))
      return std::move(e);
    if (llvm::Error e = push(parts[2], 1, 1 << 10, "the widening factor"))
      return std::move(e);
    struct Optional {
      char prefix;
      int64_t hi, otherwise;
      const char *what;
    };
    const Optional optional[] = {{'i', 1 << 16, 224, "the image size"},
                                 {'c', 1 << 16, 64, "the stem's width"},
                                 {'k', 1 << 24, 1000, "the class count"}};
    size_t next = 3;
    for (const Optional &o : optional) {
      if (next < parts.size() && !parts[next].empty() && parts[next][0] == o.prefix) {
        const std::string text = parts[next].substr(1);
        if (!digits(text))
          return unknown();
        if (llvm::Error e = push(text, 1, o.hi, o.what))
          return std::move(e);
        ++next;
      } else {
        out.numbers.push_back(o.otherwise);
      }
    }
    if (next != parts.size())
      return unknown();
    return out;
  }
  if (family == "rnn") {
    // rnn-L-H, H in units of 1024 when it ends in K.
    if (parts.size() != 3 || !digits(parts[1]))
      return unknown();
    std::string hidden = parts[2];
    const bool kilo = !hidden.empty() && (hidden.back() == 'k' || hidden.back() == 'K');
    if (kilo)
      hidden.pop_back();
    if (!digits(hidden))
      return unknown();
    out.family = ModelName::Rnn;
    if (llvm::Error e = push(parts[1], 1, 10000, "the layer count"))
      return std::move(e);
    if (llvm::Error e = push(hidden, 1, kilo ? (1 << 14) : (1 << 24), "the hidden size"))
      return std::move(e);
    if (kilo)
      out.numbers[1] *= 1024;
    return out;
  }
  if (family == "gpt") {
    if (parts.size() != 5 || !std::all_of(parts.begin() + 1, parts.end(), digits))
      return unknown();
    out.family = ModelName::Gpt;
    const std::pair<int64_t, const char *> fields[] = {{10000, "the layer count"},
                                                       {1 << 20, "the hidden size"},
                                                       {1 << 16, "the head count"},
                                                       {1 << 24, "the sequence length"}};
    for (size_t k = 0; k < 4; ++k)
      if (llvm::Error e = push(parts[k + 1], 1, fields[k].first, fields[k].second))
        return std::move(e);
    return out;
  }
  return unknown();
}

llvm::Expected<Graph> buildModel(const ModelName &name, int64_t batch) {
  if (batch < 1 || batch > kMaxZooExtent)
    return stringError(fmt::format("model '{}': a batch of {} is out of range (1 to {})", name.text,
                                   batch, kMaxZooExtent));
  const std::vector<int64_t> &v = name.numbers;
  switch (name.family) {
  case ModelName::Mlp:
    return buildMlp({1024, 4096, 4096, 1000}, batch);
  case ModelName::WResNet:
    return buildWResNet(static_cast<int>(v[0]), v[1], batch, v[2], v[3], v[4]);
  case ModelName::Rnn:
    return buildRnn(static_cast<int>(v[0]), v[1], batch);
  case ModelName::Gpt:
    return buildTransformer(static_cast<int>(v[0]), v[1], v[2], v[3], batch);
  }
  return stringError(fmt::format("model '{}': unknown family", name.text));
}

llvm::Expected<Graph> buildModel(const std::string &name, int64_t batch) {
  auto parsed = parseModelName(name);
  if (!parsed)
    return parsed.takeError();
  return buildModel(*parsed, batch);
}

std::string zooHelp() {
  return "models: mlp, wresnet-<50|101|152>-<W>[-i<image>][-c<base width>][-k<classes>] (e.g. "
         "wresnet-152-10; wresnet-50-1-i32-c8-k10 is a small one), rnn-<L>-<H> (e.g. "
         "rnn-10-8K), gpt-<layers>-<hidden>-<heads>-<seq> (e.g. gpt-12-768-12-1024)";
}

} // namespace tofu
