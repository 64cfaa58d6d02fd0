# Debian packages of the installed tree (`make package`, i.e. cpack in the
# build directory): `ringmaster` (the binary: server, agent, CLI and the
# tasks' shim; ringmaster-sim; the systemd units; docs and example configs)
# and, where libtorch was found, `ringmaster-torch` (ringmaster-train and the
# torch.distributed backend), so a server machine does not pull in libtorch.
# Depends: the shared libraries the binaries load (dpkg-shlibdeps) and the
# tools they run; never a build's -dev package. docs/install.md.
set(RM_PACKAGE_MAINTAINER "Ringmaster maintainers <ringmaster@example.org>"
    CACHE STRING "the Maintainer field of the Debian packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ringmaster)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${RM_PACKAGE_MAINTAINER}")
# Packages install under /usr (Debian's packages never use /usr/local), with
# the prefix known to the install rules, which write it into the units.
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# Where `make package` leaves the .deb files.
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ringmaster)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_RINGMASTER_PACKAGE_NAME ringmaster)
set(CPACK_DEBIAN_RINGMASTER_PACKAGE_SECTION admin)
# The first line is the summary; CPack indents the rest, an empty line is a paragraph break.
set(CPACK_DEBIAN_RINGMASTER_DESCRIPTION "distributed deep-learning platform: server, agent and CLI
Ringmaster places users' jobs (interactive environments, training runs,
distributed training runs) on a cluster of CPU and GPU hosts, runs every
task isolated under its user's own uid, streams its logs and says why a job
waits. One binary is the server (REST API, scheduler, SQLite metadata,
users' files), the agent that runs tasks on each node, and the CLI.

The systemd units ringmaster-server and ringmaster-agent are installed but
neither enabled nor started: each needs its config in /etc/ringmaster
first (examples in /usr/share/doc/ringmaster/examples).")
# `ip` (the agent's container overlay and net-attach), adduser (postinst).
set(CPACK_DEBIAN_RINGMASTER_PACKAGE_DEPENDS "iproute2, adduser")
# Each for some setups only: container executors (runc, docker.io), the
# overlay networks (iptables, ethtool; openvswitch-switch for ovs-gre),
# `ringmaster images build` (mmdebstrap, jq; python3-pip for the tensorflow
# and mxnet images), and training.
set(CPACK_DEBIAN_RINGMASTER_PACKAGE_SUGGESTS
    "ringmaster-torch, runc, docker.io, openvswitch-switch, iptables, ethtool, mmdebstrap, jq, python3-pip")
set(CPACK_DEBIAN_RINGMASTER_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)

if(TARGET ringmaster-train)
  list(APPEND CPACK_COMPONENTS_ALL torch)
  set(CPACK_DEBIAN_TORCH_PACKAGE_NAME ringmaster-torch)
  set(CPACK_DEBIAN_TORCH_PACKAGE_SECTION science)
  set(CPACK_DEBIAN_TORCH_DESCRIPTION "distributed deep-learning platform: trainer and torch backend
ringmaster-train, Ringmaster's libtorch trainer, and the Python package
ringmaster_torch, which registers the torch.distributed backend named
ringmaster (Ringmaster's own collectives: ring all-reduce over TCP and
shared memory). The agent of the ringmaster package stages both for the
tasks it runs, on their PATH and PYTHONPATH.")
  # The agent stages these for tasks: the same build as the agent, always.
  set(CPACK_DEBIAN_TORCH_PACKAGE_DEPENDS "ringmaster (= ${PROJECT_VERSION})")
  # The backend is a module of Debian's python3-torch; the trainer needs only libtorch.
  set(CPACK_DEBIAN_TORCH_PACKAGE_RECOMMENDS "python3-torch")
endif()

include(CPack)
