# On the login node, after deliver.sh, as: sh -c "<both>" fluksio-submit TOKEN_FILE CA_FILE
#
# The job script follows the token on stdin, and sbatch reads it. One round trip: the
# files are written and the job submitted together.
sbatch --parsable
status=$?
# A job sbatch refused will never read its token: it goes now.
[ "$status" = 0 ] || rm -f -- "$HOME/$1"
exit "$status"
