# Writes the build's version header: `cmake -DSOURCE_DIR=... -DTEMPLATE=...
# -DOUTPUT=... -DVERSION=... [-DGIT_COMMIT=...] -P version.cmake`.
# Run at configure time and again at every build (the rm_version_header
# target), so the commit is current after each `git commit` without a
# reconfigure. configure_file() rewrites OUTPUT only when its text changes,
# so an unchanged commit rebuilds nothing.
#
# The commit: GIT_COMMIT when given (a build from a tarball that knows it),
# else HEAD's short hash when SOURCE_DIR is the top of a git work tree,
# with "-dirty" when a tracked file differs from HEAD; else "unknown".
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR TEMPLATE OUTPUT VERSION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "version.cmake: -D${var}=... is required")
  endif()
endforeach()

set(RM_GIT_COMMIT "unknown")
if(DEFINED GIT_COMMIT AND NOT GIT_COMMIT STREQUAL "")
  set(RM_GIT_COMMIT "${GIT_COMMIT}")
else()
  find_program(GIT_EXECUTABLE git)
  if(GIT_EXECUTABLE)
    # Only SOURCE_DIR's own repository: a tarball unpacked inside some other
    # checkout must not take that checkout's commit.
    execute_process(COMMAND ${GIT_EXECUTABLE} -C "${SOURCE_DIR}" rev-parse --show-toplevel
                    OUTPUT_VARIABLE top OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0)
      file(REAL_PATH "${top}" top)
      file(REAL_PATH "${SOURCE_DIR}" src)
    endif()
    if(rc EQUAL 0 AND top STREQUAL src)
      execute_process(COMMAND ${GIT_EXECUTABLE} -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                      OUTPUT_VARIABLE hash OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
      if(rc EQUAL 0 AND hash MATCHES "^[0-9a-f]+$")
        set(RM_GIT_COMMIT "${hash}")
        # Tracked files only: an untracked scratch file is not part of the build.
        # --no-optional-locks: never the index lock a concurrent `git commit` may need.
        execute_process(COMMAND ${GIT_EXECUTABLE} --no-optional-locks -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                        OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
        if(NOT rc EQUAL 0 OR NOT changes STREQUAL "")
          string(APPEND RM_GIT_COMMIT "-dirty")
        endif()
      endif()
    endif()
  endif()
endif()

set(RM_VERSION "${VERSION}")
configure_file("${TEMPLATE}" "${OUTPUT}" @ONLY)
