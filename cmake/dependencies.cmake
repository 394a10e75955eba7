# Library layering, checked at configure time (issue 10; DESIGN §5: one library per folder,
# dependencies only point down). Every meshnode library must have a row here naming the meshnode
# libraries it may link directly; a link to anything else fails the configure step with the
# offending edge, and so does a meshnode library without a row. The README's architecture section
# shows the same table. Third-party targets are not listed (except the rules below).
#
# Extra rules:
# - `admin` (the proxy's own endpoints) is linked by app only: nothing else may depend on it.
# - the CNI plugin (cni_core) must not reach Asio or gRPC, directly or through what it links
#   (DESIGN §1). Its shared runtimes are checked on the binary by the cni_links_no_protobuf test.
# - generated protocol libraries (meshnode_<x>_proto) are leaves any row may name.

set(MESHNODE_LAYERS
  "base:"
  "telemetry:base"
  "net:base,telemetry"
  "http:base,telemetry,net"
  "tls:base,net"
  "h2:base,telemetry,net,tls"
  "hbone:base,net,tls,h2"
  "state:base"
  "config:base,state"
  "nodeapi:base"
  "proxy:base,telemetry,net,tls,h2,hbone,state"
  "inpod:base,telemetry,net,tls,h2,hbone,state,proxy,nodeapi"
  "admin:base,telemetry,net,http,tls,state,ca,xds"
  "app:base,telemetry,net,http,tls,h2,hbone,state,config,nodeapi,proxy,inpod,admin,xds,ca"
  "agent_core:base,telemetry,net,http,nodeapi,kube"
  "cni_core:base,nodeapi"
  # gRPC, wrapped once (channels, env endpoints, the completion-queue loop) and the generated stubs.
  "rpc:base"
  "mesh_grpc:"
  "xds:base,state,config,rpc,mesh_grpc"
  "ca:base,net,tls,state,rpc,mesh_grpc"
  "kube:base"
  # Asio's, fmt's and spdlog's separately compiled sources (cmake/deps.cmake): third-party code,
  # links nothing of ours.
  "asio_impl:"
  "fmt:"
  "spdlog:")

set(MESHNODE_ASIO_FREE cni_core)

# meshnode_check_dependencies(): run once every library has been defined.
function(meshnode_check_dependencies)
  set(known "")
  foreach(row IN LISTS MESHNODE_LAYERS)
    # "lib:dep,dep": ';' cannot separate inside one element of a CMake list.
    string(REPLACE ":" ";" parts "${row}")
    string(REPLACE "," ";" parts "${parts}")
    list(GET parts 0 lib)
    list(REMOVE_AT parts 0)
    list(APPEND known ${lib})
    set(allowed_${lib} "${parts}")
  endforeach()

  _meshnode_libraries("${PROJECT_SOURCE_DIR}" libraries)
  set(problems "")
  foreach(target IN LISTS libraries)
    string(REGEX REPLACE "^meshnode_" "" lib "${target}")
    if(lib MATCHES "_proto$")
      continue()
    endif()
    if(NOT lib IN_LIST known)
      string(APPEND problems "\n  ${target} has no row in cmake/dependencies.cmake (MESHNODE_LAYERS): add the libraries it may link")
      continue()
    endif()
    _meshnode_direct_deps(${target} deps)
    foreach(dep IN LISTS deps)
      if(dep MATCHES "_proto$")
        continue()
      endif()
      if(NOT dep IN_LIST allowed_${lib})
        string(APPEND problems "\n  ${lib} links upward (or sideways) to ${dep}; allowed: ${allowed_${lib}}")
      endif()
      if(dep STREQUAL "admin" AND NOT lib STREQUAL "app")
        string(APPEND problems "\n  ${lib} depends on admin: only app may (admin holds the proxy's own endpoints)")
      endif()
    endforeach()
  endforeach()

  foreach(lib IN LISTS MESHNODE_ASIO_FREE)
    if(TARGET meshnode_${lib})
      _meshnode_closure(meshnode_${lib} closure)
      foreach(forbidden meshnode_asio gRPC::grpc++ gRPC::grpc)
        if(forbidden IN_LIST closure)
          string(APPEND problems "\n  ${lib} must not reach ${forbidden} (DESIGN §1), but its dependencies link it")
        endif()
      endforeach()
    endif()
  endforeach()

  if(problems)
    message(FATAL_ERROR "meshnode library layering violated:${problems}")
  endif()
  list(LENGTH libraries count)
  message(STATUS "meshnode layering: ${count} libraries, every link points down")
endfunction()

# Every static library target named meshnode_* defined in `dir` or below.
function(_meshnode_libraries dir out)
  set(found "")
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(t MATCHES "^meshnode_" AND type STREQUAL "STATIC_LIBRARY" AND NOT t STREQUAL "meshnode_test_fakes")
      list(APPEND found ${t})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _meshnode_libraries("${sub}" more)
    list(APPEND found ${more})
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# What `target` links: LINK_LIBRARIES and INTERFACE_LINK_LIBRARIES, $<LINK_ONLY:...> unwrapped.
function(_meshnode_links target out)
  set(all "")
  foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
    get_target_property(links ${target} ${prop})
    if(links)
      foreach(link IN LISTS links)
        if(link MATCHES "^\\$<LINK_ONLY:(.+)>$")
          set(link "${CMAKE_MATCH_1}")
        endif()
        list(APPEND all ${link})
      endforeach()
    endif()
  endforeach()
  set(${out} "${all}" PARENT_SCOPE)
endfunction()

# The meshnode libraries `target` links directly (names without the meshnode_ prefix).
function(_meshnode_direct_deps target out)
  _meshnode_links(${target} links)
  set(deps "")
  foreach(link IN LISTS links)
    # One regex: a failed MATCHES clears CMAKE_MATCH_n, so no second test in the same if().
    if(link MATCHES "^meshnode(::|_)(.+)$")
      set(name "${CMAKE_MATCH_2}")
      if(NOT name MATCHES "^(warnings|asio|fmt|spdlog)$")
        list(APPEND deps ${name})
      endif()
    endif()
  endforeach()
  list(REMOVE_DUPLICATES deps)
  set(${out} "${deps}" PARENT_SCOPE)
endfunction()

# Every target `target` reaches through what it links, aliases resolved.
function(_meshnode_closure target out)
  set(seen "")
  set(todo ${target})
  list(LENGTH todo left)
  while(left GREATER 0)
    list(POP_FRONT todo t)
    if(TARGET ${t})
      get_target_property(aliased ${t} ALIASED_TARGET)
      if(aliased)
        set(t ${aliased})
      endif()
      if(NOT t IN_LIST seen)
        list(APPEND seen ${t})
        _meshnode_links(${t} links)
        list(APPEND todo ${links})
      endif()
    endif()
    list(LENGTH todo left)
  endwhile()
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()
