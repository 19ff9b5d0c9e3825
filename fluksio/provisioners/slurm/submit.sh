# On the login node, as: sh -c "<this file>" fluksio-submit TOKEN_FILE [CA_FILE]
#
# stdin holds the worker's token (one line), then, only with CA_FILE, the engine's CA in
# base64 (one line), then the job script, which sbatch reads. The token and the CA go to
# files only the login user can read, named relative to $HOME; neither is ever in an argv
# or the script. `read` takes stdin a byte at a time, so nothing of the script is consumed
# with them. One round trip: the files are written and the job submitted together.
umask 077
mkdir -p -- "$HOME/.fluksio/tokens" || exit
IFS= read -r token || exit
if [ -n "$2" ]; then
    IFS= read -r ca || exit
    mkdir -p -- "$HOME/.fluksio/ca" || exit
    printf '%s' "$ca" | base64 -d > "$HOME/$2.new" || exit
    mv -f -- "$HOME/$2.new" "$HOME/$2" || exit
fi
printf '%s\n' "$token" > "$HOME/$1" || exit
unset token
sbatch --parsable
status=$?
# A job sbatch refused will never read its token: it goes now.
[ "$status" = 0 ] || rm -f -- "$HOME/$1"
exit "$status"
