# Around a batch backend's cancel command (BatchProvisioner.cancel_command), as
#   sh -c "<this>" fluksio-cancel JOB_ID TOKEN_FILE
# JOB_ID may be empty (a request whose job was never learned). A job that already ended
# is cancelled quietly (what the command says then is in cancel_gone, tolerated by the
# line batch.py fills in); the token file goes either way (a job cancelled before it
# started never read it).
status=0
if [ -n "$1" ]; then
    said=$({command} "$1" 2>&1) || status=$?
{tolerate}    [ "$status" = 0 ] || printf '%s\n' "$said" >&2
fi
rm -f -- "$HOME/$2"
exit "$status"
