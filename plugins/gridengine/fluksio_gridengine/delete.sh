# On the submit host, as: sh -c "<this>" fluksio-delete JOB_ID TOKEN_FILE
#
# JOB_ID may be empty (a request whose job was never learned). Deleting a job that has
# already ended succeeds: qdel says it "does not exist", which is what was wanted. The
# token file goes either way: a job deleted before it started never read (and removed) it.
status=0
if [ -n "$1" ]; then
    said=$(qdel -- "$1" 2>&1) || case "$said" in
        *"does not exist"*) ;;
        *) printf '%s\n' "$said" >&2; status=1 ;;
    esac
fi
rm -f -- "$HOME/$2"
exit "$status"
