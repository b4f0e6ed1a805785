#!/bin/sh
# mpirun's remote launcher for test/mpi/test_mpi.py's two "hosts": network namespaces on this machine instead of
# machines reached by ssh. mpirun calls it as `netns_rsh.sh <host> <command...>`; PETAGRAD_NETNS maps each host address
# to its namespace ("10.231.77.11=pg1 10.231.77.12=pg2").
host="$1"; shift
for pair in $PETAGRAD_NETNS; do
  if [ "${pair%%=*}" = "$host" ]; then
    ns="${pair#*=}"
    # each "host" its own session folder: the namespaces share /tmp and one hostname, so two daemons of one job
    # would make the same folders side by side (Open MPI then fails with "File exists" now and then)
    cmd=$(printf '%s' "$*" | sed "s|orte_tmpdir_base \"\([^\"]*\)\"|orte_tmpdir_base \"\1/$ns\"|")
    exec ip netns exec "$ns" sh -c "$cmd"
  fi
done
echo "netns_rsh.sh: no namespace for host $host (PETAGRAD_NETNS=$PETAGRAD_NETNS)" >&2
exit 1
