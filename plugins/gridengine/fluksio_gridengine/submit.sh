# On the submit host, after the token is delivered, as:
#   sh -c "<deliver><this>" fluksio-submit TOKEN_FILE CA_FILE
#
# The job script follows the token on stdin, and qsub reads it from there. One round trip:
# the token written and the job submitted together. Jobs' output goes to one directory.
mkdir -p -- "$HOME/.fluksio/jobs" || exit
qsub -terse
status=$?
# A job qsub refused will never read its token: it goes now.
[ "$status" = 0 ] || rm -f -- "$HOME/$1"
exit "$status"
