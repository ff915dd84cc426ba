// The exported dlsym. A lookup in a library handle (the CUDA runtime's dlopen("libcuda.so.1") +
// dlsym) does not see preloaded libraries, so without this the runtime would never call a hook.
//
// Why it is safe. glibc's dlsym answers RTLD_DEFAULT and RTLD_NEXT relative to its caller, which
// it finds by its return address: RTLD_NEXT means "the next object after the one that called".
// Those two go to the real dlsym by a tail jump (every path below ends in a call in tail position
// with dlsym's own signature, all noexcept, and this file is built with -O2
// -foptimize-sibling-calls whatever the build type), so the return address glibc sees is the
// application's and the answer is the one it would have had without us, even for a library
// that calls dlsym(RTLD_NEXT, ...) from its initialiser before anything of ours ran: the real
// dlsym is then found first (dlvsym(RTLD_NEXT, "dlsym", ...)), its arguments kept, and jumped
// to. A handle lookup does not depend on the caller; for it, dlsymForHandle may swap the
// driver's function for our hook (only when the real answer is exactly the function the hook
// wraps). No hook calls the exported name, so nothing recurses. The interposer test checks that
// dlsym(RTLD_NEXT, ...) still answers for its caller.
#include <dlfcn.h>

#include "cuda/internal/interposer.h"

TESSERA_CUDA_EXPORT void* dlsym(void* handle, const char* symbol) noexcept {
  if (handle != RTLD_DEFAULT && handle != RTLD_NEXT) {
    return tessera::cuda::internal::dlsymForHandle(handle, symbol);
  }
  return tessera::cuda::internal::realDlsym()(handle, symbol);
}
