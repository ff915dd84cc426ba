# The web console's build (docs/console.md), included by src/server/CMakeLists.txt:
#   1. `npm ci` into <build>/web/node_modules, from web/package.json and web/package-lock.json
#      copied there, and only again when either changes (the source tree gets no node_modules);
#   2. web/build.mjs type-checks the TypeScript (tsc) and bundles it with esbuild into
#      <build>/web/dist: index.html, content-hashed app-<hash>.js and app-<hash>.css, favicon;
#   3. embed_console_assets.cmake writes those files into console_assets.cc as byte arrays,
#      compiled into tessera_server, so `tessera dev` and `tessera server` serve them with no
#      file beside the binary and nothing fetched at run time.
# Sets TESSERA_CONSOLE_ASSETS_CC (the generated source) and TESSERA_NODE_MODULES (for the
# browser test, tests/console).

find_program(TESSERA_NODE node)
find_program(TESSERA_NPM npm)
if(NOT TESSERA_NODE OR NOT TESSERA_NPM)
  message(FATAL_ERROR
          "The web console (web/) is built with Node.js and npm, and neither may be missing: "
          "node=${TESSERA_NODE}, npm=${TESSERA_NPM}. Install them with scripts/bootstrap (Debian "
          "packages nodejs and npm), then configure again.")
endif()
execute_process(COMMAND ${TESSERA_NODE} --version OUTPUT_VARIABLE tessera_node_version
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(tessera_node_version VERSION_LESS "v18")
  message(FATAL_ERROR "The web console's build needs Node.js 18 or later; ${TESSERA_NODE} is "
                      "${tessera_node_version}")
endif()

set(TESSERA_WEB_SOURCE_DIR ${PROJECT_SOURCE_DIR}/web)
set(TESSERA_WEB_BINARY_DIR ${PROJECT_BINARY_DIR}/web)
set(TESSERA_NODE_MODULES ${TESSERA_WEB_BINARY_DIR}/node_modules)
set(TESSERA_CONSOLE_ASSETS_CC ${CMAKE_CURRENT_BINARY_DIR}/console_assets.cc)

add_custom_command(
  OUTPUT ${TESSERA_WEB_BINARY_DIR}/npm-ci.stamp
  COMMAND ${CMAKE_COMMAND} -E make_directory ${TESSERA_WEB_BINARY_DIR}
  COMMAND ${CMAKE_COMMAND} -E copy ${TESSERA_WEB_SOURCE_DIR}/package.json
          ${TESSERA_WEB_SOURCE_DIR}/package-lock.json ${TESSERA_WEB_BINARY_DIR}/
  COMMAND ${TESSERA_NPM} ci --no-audit --no-fund --loglevel=error
  COMMAND ${CMAKE_COMMAND} -E touch ${TESSERA_WEB_BINARY_DIR}/npm-ci.stamp
  DEPENDS ${TESSERA_WEB_SOURCE_DIR}/package.json ${TESSERA_WEB_SOURCE_DIR}/package-lock.json
  WORKING_DIRECTORY ${TESSERA_WEB_BINARY_DIR}
  COMMENT "npm ci: the web console's packages (web/package-lock.json)"
  VERBATIM)

file(GLOB_RECURSE tessera_web_sources CONFIGURE_DEPENDS ${TESSERA_WEB_SOURCE_DIR}/src/*)
add_custom_command(
  OUTPUT ${TESSERA_CONSOLE_ASSETS_CC}
  COMMAND ${TESSERA_NODE} ${TESSERA_WEB_SOURCE_DIR}/build.mjs --out ${TESSERA_WEB_BINARY_DIR}/dist
          --node-modules ${TESSERA_NODE_MODULES}
  COMMAND ${CMAKE_COMMAND} -DDIST=${TESSERA_WEB_BINARY_DIR}/dist -DOUT=${TESSERA_CONSOLE_ASSETS_CC}
          -P ${CMAKE_CURRENT_LIST_DIR}/embed_console_assets.cmake
  DEPENDS ${TESSERA_WEB_BINARY_DIR}/npm-ci.stamp ${tessera_web_sources}
          ${TESSERA_WEB_SOURCE_DIR}/build.mjs ${TESSERA_WEB_SOURCE_DIR}/tsconfig.json
          ${CMAKE_CURRENT_LIST_DIR}/embed_console_assets.cmake
  WORKING_DIRECTORY ${TESSERA_WEB_SOURCE_DIR}
  COMMENT "The web console: tsc, esbuild, embedded into console_assets.cc"
  VERBATIM)
