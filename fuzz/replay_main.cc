// A main() for fuzz targets built without libFuzzer: runs LLVMFuzzerTestOneInput once on every
// file given, or on every file inside each directory given. The `<name>_fuzz_corpus` tests use
// it to replay the seed corpus (and every crash input added to it) in the ordinary build.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (const fs::directory_entry& entry : fs::directory_iterator(arg)) {
        if (entry.is_regular_file()) {
          inputs.push_back(entry.path());
        }
      }
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    } else {
      std::cerr << arg.string() << ": no such file or directory\n";
      return 1;
    }
  }
  if (inputs.empty()) {
    std::cerr << "usage: " << argv[0] << " FILE_OR_DIR... (no inputs found)\n";
    return 1;
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::cerr << path.string() << ": read error\n";
      return 1;
    }
    std::cerr << "running " << path.filename().string() << "\n";
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  std::cout << "ran " << inputs.size() << " inputs without a crash\n";
  return 0;
}
