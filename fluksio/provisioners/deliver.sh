# The start of every program that hands a worker its token, as: sh -c "<this><program>"
# NAME TOKEN_FILE CA_FILE ...
#
# stdin holds the worker's token (one line), then, only with CA_FILE (else ""), the
# engine's CA in base64 (one line), then what the program reads (a job script, a worker
# script). The token and the CA go to files only this user can read, named relative to
# $HOME; neither is ever in an argv or a script. `read` takes stdin a byte at a time, so
# nothing of what follows is consumed with them.
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
