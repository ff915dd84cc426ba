# Copies one of etcd's .proto files (from Debian's golang-etcd-server-dev) to IN -> OUT without
# what only Go code generation needs: the gogoproto options and the grpc-gateway HTTP
# annotations, whose own .proto files are not installed with it. Run as
#   cmake -DIN=<etcd .proto> -DOUT=<copy> -P etcd_protos.cmake
# by src/store/CMakeLists.txt, at build time. The messages and services are left as they are, so
# what protoc generates speaks etcd's wire format exactly.
file(READ "${IN}" text)
string(REGEX REPLACE "import \"(gogoproto/gogo|google/api/annotations)\\.proto\";" "" text
                     "${text}")
# File options: option (gogoproto.marshaler_all) = true;
string(REGEX REPLACE "option \\(gogoproto\\.[a-z_]+\\) = [a-z]+;" "" text "${text}")
# Field options: [(gogoproto.nullable) = false] (none in the files we use today).
string(REGEX REPLACE " *\\[\\(gogoproto\\.[^]]*\\]" "" text "${text}")
# Method options: option (google.api.http) = { post: "/v3/kv/range" body: "*" }; with at most
# one level of nested braces (additional_bindings { ... }).
string(REGEX REPLACE "option \\(google\\.api\\.http\\) = {([^{}]|{[^{}]*})*};" "" text
                     "${text}")
if(text MATCHES "gogoproto|google\\.api")
  message(FATAL_ERROR "${IN}: an option this script does not know how to strip is left; "
                      "extend src/store/etcd_protos.cmake")
endif()
file(WRITE "${OUT}" "${text}")
