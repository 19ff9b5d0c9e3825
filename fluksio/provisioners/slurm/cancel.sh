# On the login node, as: sh -c "<this file>" fluksio-cancel JOB_ID TOKEN_FILE
#
# JOB_ID may be empty (a request whose job was never learned). The token file goes whether
# or not there was a job to cancel, or scancel worked: a job cancelled before it started
# never read (and removed) it.
status=0
if [ -n "$1" ]; then
    scancel -- "$1" || status=$?
fi
rm -f -- "$HOME/$2"
exit "$status"
