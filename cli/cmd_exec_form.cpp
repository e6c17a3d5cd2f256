// `hla exec-form --form FORM DIR`: a registered form answering `hla verify --exec` (verify/exec.hpp's protocol) as an
// outside implementation would — case files in, o.npy (and state_out/, dq/dk/dv/dgamma.npy) out — so that a form of
// this harness, the GPU forms above all, is held by the same battery, bounds and diagnosis as a kernel written
// elsewhere, through the same files:
//   hla verify --op hla2 --gates --grad --precision bf16 --dtype float32 --exec "build/bin/hla exec-form --form
//   cuda-fused-bf16"
// Each case runs (op, FORM)'s variant that computes the operator (Registry::find_exact) in the case's dtype (float32:
// the float form, float64: the double one), with the case's exact options and gates, from its state_in when given.
// Gradients (--grad) come from the GPU forms' backward (fast/cuda/device.hpp), from the zero state; a CPU form has no
// backward of its own to hold (its gradients are the harness's serial ones), so asking one for gradients is refused.
// The command stays for later rounds when started with HLA_VERIFY_REPLY_FD/HLA_VERIFY_ROUND_FD (the protocol's kept
// command: CUDA's start-up once per battery instead of once per round). A case it cannot answer (a form that refuses
// the options, a vanishing normalizer) is left without outputs and named on stderr: the battery reports it.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.hpp"
#include "core/inputs.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"
#include "fast/cuda/register.hpp"
#include "io/files.hpp"
#include "io/npy.hpp"
#include "verify/cases.hpp"

namespace hla::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The GPU form a registered form name stands for: cuda-chunked / cuda-fused, with -tf32 or -bf16 products.
struct DeviceForm {
  bool fused = false;
  Products products = Products::ieee;
};
std::optional<DeviceForm> device_form(const std::string& form) {
  for (const bool fused : {false, true}) {
    const std::string base = fused ? "cuda-fused" : "cuda-chunked";
    if (form == base) return DeviceForm{fused, Products::ieee};
    if (form.rfind(base + "-", 0) == 0)
      if (const auto p = try_parse<Products>(form.substr(base.size() + 1))) return DeviceForm{fused, *p};
  }
  return std::nullopt;
}

// A 2-D array as it is, a 1-D one (gates, a vector state part) as a column. At most 2^27 values (1 GiB as doubles):
// a header that promises more is refused before its data is read (verify's own cases are far smaller).
Mat<double> read_matrix(const fs::path& file) {
  const npy::Array a = npy::read(file, std::size_t{1} << 27);
  if (a.shape.size() != 1) return npy::to_matrix(a, file.filename().string());
  Mat<double> m(static_cast<Eigen::Index>(a.shape[0]), 1);
  for (std::size_t i = 0; i < a.data.size(); ++i) m(static_cast<Eigen::Index>(i), 0) = a.data[i];
  return m;
}

template <class T> void answer_case(const std::string& form, const fs::path& cd) {
  const json c = json::parse(read_regular_file(cd / "case.json"));
  const std::string op = c.at("op").get<std::string>();
  const npy::DType dtype = c.at("dtype").get<std::string>() == "float32" ? npy::DType::f32 : npy::DType::f64;
  Options opt;
  opt.gamma = parse_rational(c.at("exact").at("gamma").get<std::string>(), "gamma");
  opt.eps = parse_rational(c.at("exact").at("eps").get<std::string>(), "eps");
  opt.ridge = parse_rational(c.at("exact").at("ridge").get<std::string>(), "ridge");
  opt.normalized = c.at("normalized").get<bool>();
  opt.state = c.value("state", false);
  Problem<double> in{read_matrix(cd / "q.npy"), read_matrix(cd / "k.npy"), read_matrix(cd / "v.npy")};
  if (c.value("gates", false)) in.gates = read_matrix(cd / "gamma.npy");
  const Eigen::Index d = in.Q.cols(), dv = in.V.cols();
  NamedState<T> init;
  for (const auto& name : c.value("state_in", json::array())) {
    const std::string part = name.get<std::string>();
    init.parts.emplace_back(part, read_matrix(cd / "state_in" / (part + ".npy")).template cast<T>());
  }
  const Problem<T> p = convert_problem<T>(in);
  const Entry<T>& e = registry<T>().find_exact(op, form);
  const Run<T> run = e(p, opt, init.parts.empty() ? nullptr : &init);
  npy::write(cd / "o.npy", Mat<double>(run.O.template cast<double>()), dtype);
  if (opt.state) {  // the protocol's parts (verify::ext::state_layout): vectors as 1-D arrays
    fs::create_directories(cd / "state_out");
    for (const verify::ext::PartShape& part : verify::ext::state_layout(op, d, dv)) {
      const Mat<double> x = run.state.at(part.name).template cast<double>();
      if (part.vector)
        npy::write(cd / "state_out" / (part.name + ".npy"), std::vector<double>(x.data(), x.data() + x.size()), dtype);
      else
        npy::write(cd / "state_out" / (part.name + ".npy"), x, dtype);
    }
  }
  if (!c.value("grad", false)) return;
  const std::optional<DeviceForm> dev = device_form(form);
  if (!dev)
    throw InputError("exec-form: gradients come from the GPU forms' backward; '" + form +
                     "' is a CPU form, whose gradients are the harness's own");
  if (!init.parts.empty()) throw InputError("exec-form: the GPU backward starts from the zero state");
  const Mat<T> dO = read_matrix(cd / "do.npy").template cast<T>();
  const auto gop = fast::cuda::gpu_op_named(op);
  if (!gop) throw InputError("exec-form: the GPU forms' operators are linear, hla2 and ahla, not '" + op + "'");
  const auto g = fast::cuda::gradients_on_device<T>(*gop, dev->products, dev->fused, p, opt, dO);
  npy::write(cd / "dq.npy", Mat<double>(g.dQ.template cast<double>()), dtype);
  npy::write(cd / "dk.npy", Mat<double>(g.dK.template cast<double>()), dtype);
  npy::write(cd / "dv.npy", Mat<double>(g.dV.template cast<double>()), dtype);
  if (g.dgamma.size()) {
    const ColVec<double> x = g.dgamma.template cast<double>();
    npy::write(cd / "dgamma.npy", std::vector<double>(x.data(), x.data() + x.size()), dtype);
  }
}

// Every case of one round; returns how many could not be answered.
int answer_round(const std::string& form, const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec)))
    throw InputError("exec-form: '" + dir.string() + "' is not a directory of cases");
  int failed = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (!entry.is_directory()) continue;
    try {
      const json c = json::parse(read_regular_file(entry.path() / "case.json"));
      if (c.at("dtype").get<std::string>() == "float32")
        answer_case<float>(form, entry.path());
      else
        answer_case<double>(form, entry.path());
    } catch (const std::exception& err) {
      ++failed;
      fmt::print(stderr, "exec-form: {}: {}\n", entry.path().filename().string(), err.what());
    }
  }
  return failed;
}

int env_fd(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long fd = std::strtol(v, &end, 10);
  return (*end == '\0' && fd >= 0 && fd < 1024) ? static_cast<int>(fd) : -1;
}

const CommandRegistrar exec_form_registrar([](CLI::App& app) {
  auto form = std::make_shared<std::string>();
  auto dir = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("exec-form",
                                 "Answer `hla verify --exec` rounds with a registered form (e.g. cuda-fused-bf16)");
  sub->add_option("--form", *form, "the form, as `hla list` names it (the operator comes from each case)")->required();
  sub->add_option("dir", *dir, "the round's directory (hla verify appends it)")->required();
  sub->callback([form, dir] {
    const auto known = [&]<class T>() {
      const auto& es = registry<T>().entries();
      return std::any_of(es.begin(), es.end(), [&](const Entry<T>& e) { return e.form == *form; });
    };
    if (!known.template operator()<float>() && !known.template operator()<double>())
      throw InputError("exec-form: no registered form '" + *form + "' (hla list names them)");
    answer_round(*form, *dir);
    // The kept command (verify/exec.hpp): the round answered on fd 3, the next rounds' directories from fd 4.
    const int reply = env_fd("HLA_VERIFY_REPLY_FD"), rounds = env_fd("HLA_VERIFY_ROUND_FD");
    if (reply < 0 || rounds < 0) return;
    FILE* in = fdopen(rounds, "r");
    if (!in) return;
    std::string current = *dir;
    while (true) {
      const std::string line = current + "\n";
      if (write(reply, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return;
      char buf[4096];
      if (!std::fgets(buf, sizeof buf, in)) return;  // the end of fd 4: the battery is over
      current = buf;
      while (!current.empty() && (current.back() == '\n' || current.back() == '\r')) current.pop_back();
      answer_round(*form, current);
    }
  });
});

}  // namespace
}  // namespace hla::cli
