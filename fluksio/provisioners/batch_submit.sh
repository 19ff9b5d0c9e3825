# Around a batch backend's submit command (BatchProvisioner.submit_command), after
# deliver.sh: the job script is on stdin after the token. A job the system refused will
# never read its token, so its file goes at once. Filled in by batch.py: JOBS is where jobs
# may write their output, COMMAND the backend's submit command.
mkdir -p -- "$HOME/{jobs}" || exit
{command}
status=$?
[ "$status" = 0 ] || rm -f -- "$HOME/$1"
exit "$status"
