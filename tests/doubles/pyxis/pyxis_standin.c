/*
 * pyxis_standin.c - a stand-in for NVIDIA Pyxis (the Slurm SPANK plugin that runs
 * job steps in enroot containers), for the glm.serve local test cluster.
 *
 * WHAT IT STANDS FOR
 *   On a SUNK cluster, `srun --container-image=IMAGE cmd` runs `cmd` inside an
 *   enroot container made from IMAGE (a docker:// URI that enroot imports, or a
 *   squashfs file when IMAGE starts with "/" or "."), and `--container-save=PATH`
 *   writes the container to a squashfs file when the step ends.
 *
 * SOURCES (read for the rules below; NVIDIA/pyxis v0.24.0, NVIDIA/enroot v4.1.2)
 *   pyxis args.c: parse_mount_option/add_mount (SRC[:DST[:FLAGS]], "," between
 *     entries, "+" between flags; a source is a path starting with "." or "/",
 *     "tmpfs" or "umount"; DST defaults to SRC; the error strings), the
 *     --[no-]container-mount-home and --container-writable/--container-readonly
 *     pairs.
 *   pyxis pyxis_slurmstepd.c: validate_mount_sources ("source path does not
 *     exist"), enroot_set_env (ENROOT_MOUNT_HOME / ENROOT_ROOTFS_WRITABLE set
 *     from those flags, else left to enroot's configuration, which the job's
 *     environment overrides), the task's working directory (--container-workdir,
 *     else the container's: the image's WORKDIR), slurm_spank_task_exit ->
 *     enroot_export (`enroot export -f -o PATH` after the last task exits; its
 *     failure is logged and srun still exits 0, leaving what was written).
 *   pyxis README.md L98-105, args.c L146-152 (--container-env: exported host variables are set in the container
 *     "but their existing values in the image take precedence"), args.c L671-700 (its NAME[,NAME...] and
 *     "invalid format"), L245-247 (PYXIS_CONTAINER_ENV when the option is not given); pyxis_slurmstepd.c
 *     L657-714 spank_import_container_env (LANG, LANGUAGE, LC_ALL removed from the job unless named; every
 *     variable of the container's environment set with overwrite, the named ones without), L1061-1075 (the
 *     named variables written into enroot's environ(), when set non-empty). The v0.24 failure lines:
 *     pyxis_slurmstepd.c L753/L762 "failed to import docker image: IMAGE", L788 "failed to create container
 *     filesystem for image: IMAGE", L984+L1120 a missing mount source, L1148 "container start failed with
 *     error code: N"; v0.23.0 and older ended each with "couldn't start container" (v0.23.0 L1358), 0.24 no more.
 *   enroot v4.1.2 src/docker.sh L350-351 (the image's ENV written to the rootfs's /etc/environment at import),
 *     src/runtime.sh L32-62 runtime::_do_environ (that file through common::envsubst, ${VAR} only, then the
 *     config's environ()), src/common.sh L190-203 common::envfmt (comments, bad names, ENROOT_*, quotes), bin/
 *     common.h L148-170 load_environment (clearenv, then each line with overwrite: the last one wins).
 *   enroot conf/enroot.conf.in: ENROOT_MOUNT_HOME and ENROOT_ROOTFS_WRITABLE
 *     default to no; conf/hooks/10-home.sh mounts $HOME only when
 *     ENROOT_MOUNT_HOME is on; src/runtime.sh remounts the root filesystem
 *     read-only unless ENROOT_ROOTFS_WRITABLE; enroot.in: ENROOT_SQUASH_OPTIONS
 *     "-comp lzo -noD -exit-on-error" for mksquashfs.
 *
 * WHAT IT DOES
 *   - Registers Pyxis's srun options with Pyxis's names, argument kinds and help
 *     texts. The plugin calls itself "pyxis", so the options travel the same way
 *     (SLURM_SPANK__SLURM_SPANK_OPTION_pyxis_*). --container-mounts is parsed as
 *     Pyxis parses it, on the submit side too (a bad entry fails srun at once).
 *   - In the step (slurmstepd, user_init, as the job's user): an IMAGE that is a
 *     path must be a readable regular file holding a whole squashfs (its
 *     superblock: magic, version 4, bytes_used within the file, as `unsquashfs`
 *     needs to unpack it), else the step fails with Pyxis 0.24's messages ("pyxis:
 *     failed to create container filesystem for image: IMAGE"); a docker URI is "imported"
 *     (instantly, or after the seconds in CONTROL/pyxis-import-delay; it fails
 *     if CONTROL/pyxis-import-fail exists). Absolute mount sources must exist.
 *   - The container's environment (user_init), as Pyxis leaves it: the image's
 *     /etc/environment (a docker URI [USER@][REGISTRY#]IMAGE[:TAG]: STANDINS/images/
 *     IMAGE/TAG/etc/environment, none when absent; a squashfs: its etc/environment,
 *     read with unsquashfs -cat as the user) wins over the job's exported variables,
 *     except the names in --container-env (else PYXIS_CONTAINER_ENV); LANG,
 *     LANGUAGE and LC_ALL of the job are dropped unless named. --container-save
 *     writes the image's /etc/environment into the saved squashfs.
 *   - The container's filesystem (task_init, as the user, before the command is
 *     executed): the task enters a new user namespace (the user mapped to
 *     itself, as enroot does without --container-remap-root) and a private
 *     mount namespace, where each HIDDEN path (the host's user-writable trees:
 *     /home, /root, /tmp, /var/tmp, /dev/shm, /mnt, /srv, /media, /scratch,
 *     /data; plugin argument hide=) is an empty tmpfs of the container's own:
 *     the host's files there are not seen, and what is written there vanishes
 *     when the task ends. Read-only unless the root filesystem is writable
 *     (--container-writable, else ENROOT_ROOTFS_WRITABLE in the job's
 *     environment, else the site default rootfs_writable=, 0 like enroot's):
 *     then writes fail with "Read-only file system". The host paths named by
 *     --container-mounts (and $HOME when --container-mount-home is given, else
 *     when ENROOT_MOUNT_HOME is on in the job's environment, else when the site
 *     default mount_home= is 1; 0 like enroot's) are bind mounted at their
 *     targets, in order, read-only with the "ro" flag; "tmpfs" and "umount"
 *     sources as Pyxis does. The task then starts in --container-workdir, else
 *     in "/" (standing for the image's WORKDIR).
 *   - Container steps only: prepends STANDINS/bin to PATH and STANDINS/python to
 *     PYTHONPATH and sets GLM_STANDIN_CONTROL=CONTROL and GLM_STANDIN_IMAGE=IMAGE,
 *     so tools that live only in the image (hf, sglang) exist only in such steps.
 *     The stand-ins' own folders and the control folder are outside the hidden
 *     paths, so they are seen as a real image's files are.
 *   - --container-save=PATH: after the last local task of the step has exited,
 *     writes PATH as the job's user with mksquashfs (Debian's squashfs-tools,
 *     enroot's options): a real squashfs of a small tree that names IMAGE.
 *     CONTROL/pyxis-export-fail: the export fails after writing half the file
 *     (Pyxis logs the failure; srun still exits 0, as with the real one).
 *     CONTROL/pyxis-export-truncate: the file is cut to half and nothing is said
 *     (a filesystem that lost the end). A missing parent folder fails as Pyxis's.
 *
 * WHAT IT DOES NOT DO
 *   No image download or unpacking, entrypoint, root remapping or GPU
 *   isolation: the command runs on the host's programs (/usr, the stand-ins) as
 *   the user. The container's environment is the image's /etc/environment only
 *   (not enroot's hooks' additions, e.g. HOME, NVIDIA_*, nor its environ.d files). A mount target that does not exist is created only
 *   under a hidden path (the container's tmpfs); elsewhere the step fails (a real
 *   container would create it in its own filesystem). --container-name,
 *   remap-root and entrypoint are accepted and ignored. No
 *   sbatch/salloc (allocator) options, no PYXIS_* variables.
 *
 * plugstack.conf:  required /path/pyxis_standin.so standins=DIR control=DIR
 *                  [mount_home=0|1] [rootfs_writable=0|1] [hide=PATH[:PATH...]]
 *                  [stash=DIR: an empty folder outside the hidden paths, a mount point in the tasks' own
 *                  mount namespaces only]
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(pyxis, 1)

#define ENV_BUF 65536
#define MAX_MOUNTS 64
#define MAX_HIDDEN 32

struct mount_entry {
	char *source;
	char *target;
	char *flags; /* enroot's, "," separated */
};

static char *opt_image;
static char *opt_workdir;
static char *opt_name;
static char *opt_save;
static char *opt_env;
static int opt_mount_home = -1;
static int opt_remap_root = -1;
static int opt_entrypoint = -1;
static int opt_entrypoint_log = -1;
static int opt_writable = -1;
static struct mount_entry mounts[MAX_MOUNTS];
static int mounts_len;
static int mounts_given;

static char standins_dir[PATH_MAX] = "/var/lib/glm-cluster/standins";
static char control_dir[PATH_MAX] = "/var/lib/glm-cluster/control";
static int site_mount_home;      /* enroot.conf's ENROOT_MOUNT_HOME: off, as shipped */
static int site_rootfs_writable; /* enroot.conf's ENROOT_ROOTFS_WRITABLE: off, as shipped */
static char stash_dir[PATH_MAX] = "/var/lib/glm-cluster/run/pyxis-stash";
static char hide_arg[4096] = "/home:/root:/tmp:/var/tmp:/dev/shm:/mnt:/srv:/media:/scratch:/data";

static int enabled;
static int setup_failed; /* user_init failed: task_init fails the task, so srun exits non-zero */
static uid_t job_uid;
static gid_t job_gid;
static uint32_t job_id;
static uint32_t step_id;
static uint32_t tasks_exited;
static char job_pwd[PATH_MAX];
static char job_home[PATH_MAX];
static int mount_home;
static int rootfs_writable;
/* tasks that entered their container, counted across the step's processes (pyxis: context.shm->started_tasks) */
static volatile uint32_t *started_tasks;

static int set_string(char **dst, const char *optarg, const char *name)
{
	if (optarg == NULL || *optarg == '\0') {
		slurm_error("pyxis: --%s: argument required", name);
		return -1;
	}
	/* Slurm can call us twice with the same value. */
	if (*dst != NULL) {
		if (strcmp(*dst, optarg) == 0)
			return 0;
		slurm_error("pyxis: --%s specified multiple times", name);
		return -1;
	}
	*dst = strdup(optarg);
	return *dst ? 0 : -1;
}

static int set_flag(int *dst, int val, const char *both)
{
	if (*dst != -1 && *dst != val) {
		slurm_error("pyxis: both %s were specified", both);
		return -1;
	}
	*dst = val;
	return 0;
}

/* pyxis args.c add_mount: the source's kind gives the default flags; identical entries are kept once. */
static int add_mount(const char *source, const char *target, const char *flags)
{
	const char *default_flags;
	char buf[PATH_MAX];

	if (strspn(source, "./") > 0)
		default_flags = "x-create=auto,rbind";
	else if (strcmp(source, "tmpfs") == 0)
		default_flags = "x-create=dir";
	else if (strcmp(source, "umount") == 0)
		default_flags = "x-detach";
	else {
		slurm_error("pyxis: mount source must be a relative path, an absolute path, \"tmpfs\" or \"umount\"");
		return -1;
	}
	if (strspn(target, "./") == 0) {
		slurm_error("pyxis: mount target must be a relative path or an absolute path");
		return -1;
	}
	if (flags != NULL)
		snprintf(buf, sizeof(buf), "%s,%s", default_flags, flags);
	else
		snprintf(buf, sizeof(buf), "%s", default_flags);
	for (int i = 0; i < mounts_len; i++) {
		if (strcmp(mounts[i].source, source) == 0 && strcmp(mounts[i].target, target) == 0 &&
		    strcmp(mounts[i].flags, buf) == 0)
			return 0;
	}
	if (mounts_len == MAX_MOUNTS) {
		slurm_error("pyxis: --container-mounts: more than %d entries (stand-in limit)", MAX_MOUNTS);
		return -1;
	}
	mounts[mounts_len].source = strdup(source);
	mounts[mounts_len].target = strdup(target);
	mounts[mounts_len].flags = strdup(buf);
	if (!mounts[mounts_len].source || !mounts[mounts_len].target || !mounts[mounts_len].flags)
		return -1;
	mounts_len++;
	return 0;
}

/* pyxis args.c parse_mount_option: SRC[:DST[:FLAGS]], "+" between flags. */
static int parse_mount_option(const char *option)
{
	char *dup = strdup(option), *rest, *src, *dst, *flags = NULL;
	int rv = -1;

	if (dup == NULL)
		return -1;
	rest = dup;
	src = strsep(&rest, ":");
	if (src == NULL || *src == '\0') {
		slurm_error("pyxis: --container-mounts: invalid format: %s", option);
		goto out;
	}
	dst = src;
	if (rest != NULL) {
		dst = strsep(&rest, ":");
		if (dst == NULL || *dst == '\0') {
			slurm_error("pyxis: --container-mounts: invalid format: %s", option);
			goto out;
		}
		if (rest != NULL && rest[0] != '\0') {
			flags = rest;
			for (int i = 0; flags[i]; i++)
				if (flags[i] == '+')
					flags[i] = ',';
		}
	}
	if (add_mount(src, dst, flags) < 0) {
		slurm_error("pyxis: could not add mount entry: %s:%s", src, dst);
		goto out;
	}
	rv = 0;
out:
	free(dup);
	return rv;
}

static int cb_mounts(int v, const char *a, int r)
{
	char *dup, *rest, *entry;
	int rv = 0;
	(void)v; (void)r;

	if (a == NULL || *a == '\0') {
		slurm_error("pyxis: --container-mounts: argument required");
		return -1;
	}
	/* Slurm can call us twice with the same value (local then remote): parse it once. */
	if (mounts_given)
		return 0;
	mounts_given = 1;
	dup = strdup(a);
	if (dup == NULL)
		return -1;
	rest = dup;
	while (rv == 0 && (entry = strsep(&rest, ",")) != NULL)
		rv = parse_mount_option(entry);
	free(dup);
	return rv;
}

static int cb_image(int v, const char *a, int r) { (void)v; (void)r; return set_string(&opt_image, a, "container-image"); }
static int cb_workdir(int v, const char *a, int r) { (void)v; (void)r; return set_string(&opt_workdir, a, "container-workdir"); }
static int cb_name(int v, const char *a, int r) { (void)v; (void)r; return set_string(&opt_name, a, "container-name"); }
/* pyxis args.c spank_option_container_env: NAME[,NAME...], no empty name */
static int cb_env(int v, const char *a, int r)
{
	(void)v; (void)r;
	if (a != NULL && *a != '\0' && (a[0] == ',' || a[strlen(a) - 1] == ',' || strstr(a, ",,") != NULL)) {
		slurm_error("pyxis: --container-env: invalid format: %s", a);
		return -1;
	}
	return set_string(&opt_env, a, "container-env");
}

static int cb_save(int v, const char *a, int r)
{
	(void)v; (void)r;
	if (a != NULL && *a != '\0' && a[strlen(a) - 1] == '/') {
		slurm_error("pyxis: --container-save: target is a directory");
		return -1;
	}
	return set_string(&opt_save, a, "container-save");
}

static int cb_mount_home(int v, const char *a, int r)
{
	(void)a; (void)r;
	return set_flag(&opt_mount_home, v, "--container-mount-home and --no-container-mount-home");
}

static int cb_remap_root(int v, const char *a, int r)
{
	(void)a; (void)r;
	return set_flag(&opt_remap_root, v, "--container-remap-root and --no-container-remap-root");
}

static int cb_entrypoint(int v, const char *a, int r)
{
	(void)a; (void)r;
	return set_flag(&opt_entrypoint, v, "--container-entrypoint and --no-container-entrypoint");
}

static int cb_entrypoint_log(int v, const char *a, int r)
{
	(void)a; (void)r;
	opt_entrypoint_log = v;
	return 0;
}

static int cb_writable(int v, const char *a, int r)
{
	(void)a; (void)r;
	return set_flag(&opt_writable, v, "--container-writable and --container-readonly");
}

static struct spank_option opts[] = {
	{ "container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
	  "[pyxis] the image to use for the container filesystem. Can be either a docker image given as an enroot URI, "
	  "or a path to a squashfs file on the remote host filesystem.", 1, 0, cb_image },
	{ "container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]",
	  "[pyxis] bind mount[s] inside the container. Mount flags are separated with \"+\", e.g. \"ro+rprivate\"",
	  1, 0, cb_mounts },
	{ "container-workdir", "PATH", "[pyxis] working directory inside the container", 1, 0, cb_workdir },
	{ "container-name", "NAME",
	  "[pyxis] name to use for saving and loading the container on the host.", 1, 0, cb_name },
	{ "container-save", "PATH",
	  "[pyxis] Save the container state to a squashfs file on the remote host filesystem.", 1, 0, cb_save },
	{ "container-mount-home", NULL,
	  "[pyxis] bind mount the user's home directory. "
	  "System-level enroot settings might cause this directory to be already-mounted.", 0, 1, cb_mount_home },
	{ "no-container-mount-home", NULL, "[pyxis] do not bind mount the user's home directory", 0, 0, cb_mount_home },
	{ "container-remap-root", NULL, "[pyxis] ask to be remapped to root inside the container.", 0, 1, cb_remap_root },
	{ "no-container-remap-root", NULL, "[pyxis] do not remap to root inside the container", 0, 0, cb_remap_root },
	{ "container-entrypoint", NULL, "[pyxis] execute the entrypoint from the container image", 0, 1, cb_entrypoint },
	{ "no-container-entrypoint", NULL, "[pyxis] do not execute the entrypoint from the container image", 0, 0,
	  cb_entrypoint },
	{ "container-entrypoint-log", NULL, "[pyxis] print the output of the entrypoint script", 0, 1,
	  cb_entrypoint_log },
	{ "container-writable", NULL, "[pyxis] make the container filesystem writable", 0, 1, cb_writable },
	{ "container-readonly", NULL, "[pyxis] make the container filesystem read-only", 0, 0, cb_writable },
	{ "container-env", "NAME[,NAME...]",
	  "[pyxis] names of environment variables to override with the host environment and set at the entrypoint.",
	  1, 0, cb_env },
	SPANK_OPTIONS_TABLE_END
};

static void parse_args(int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		if (strncmp(av[i], "standins=", 9) == 0)
			snprintf(standins_dir, sizeof(standins_dir), "%s", av[i] + 9);
		else if (strncmp(av[i], "control=", 8) == 0)
			snprintf(control_dir, sizeof(control_dir), "%s", av[i] + 8);
		else if (strncmp(av[i], "mount_home=", 11) == 0)
			site_mount_home = atoi(av[i] + 11) != 0;
		else if (strncmp(av[i], "rootfs_writable=", 16) == 0)
			site_rootfs_writable = atoi(av[i] + 16) != 0;
		else if (strncmp(av[i], "stash=", 6) == 0)
			snprintf(stash_dir, sizeof(stash_dir), "%s", av[i] + 6);
		else if (strncmp(av[i], "hide=", 5) == 0)
			snprintf(hide_arg, sizeof(hide_arg), "%s", av[i] + 5);
		else
			slurm_info("pyxis: ignoring unknown plugin argument: %s", av[i]);
	}
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();

	parse_args(ac, av);
	if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE)
		return 0;
	for (int i = 0; opts[i].name != NULL; i++) {
		spank_err_t rc = spank_option_register(sp, &opts[i]);
		if (rc != ESPANK_SUCCESS) {
			slurm_error("pyxis: couldn't register option %s: %s", opts[i].name, spank_strerror(rc));
			return -1;
		}
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac; (void)av;
	if (opt_image == NULL) {
		if (mounts_len || opt_workdir || opt_save || opt_name)
			slurm_error("pyxis: ignoring container options because --container-image is not set");
		return 0;
	}
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	if (spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS)
		return -1;
	if (step_id == SLURM_BATCH_SCRIPT || step_id == SLURM_EXTERN_CONT)
		return 0;
	if (spank_get_item(sp, S_JOB_UID, &job_uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &job_gid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
		slurm_error("pyxis: couldn't get job info");
		return -1;
	}
	enabled = 1;
	return 0;
}

/* Absolute version of PATH, relative ones taken from the step's working directory. */
static void absolute(const char *path, char *out, size_t len)
{
	if (path[0] == '/' || job_pwd[0] == '\0')
		snprintf(out, len, "%s", path);
	else
		snprintf(out, len, "%s/%s", job_pwd, path);
}

static int read_control_int(const char *name, int dflt)
{
	char path[PATH_MAX];
	FILE *f;
	int v = dflt;

	snprintf(path, sizeof(path), "%s/%s", control_dir, name);
	f = fopen(path, "r");
	if (f == NULL)
		return dflt;
	if (fscanf(f, "%d", &v) != 1)
		v = dflt;
	fclose(f);
	return v;
}

static int control_exists(const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", control_dir, name);
	return access(path, F_OK) == 0;
}

/* enroot's config::fini: "n", "no", "f", "false" (any case) and "" are off, anything else on; -1 when unset. */
static int env_bool(spank_t sp, const char *name)
{
	char buf[64];

	if (spank_getenv(sp, name, buf, sizeof(buf)) != ESPANK_SUCCESS)
		return -1;
	if (buf[0] == '\0' || strcasecmp(buf, "n") == 0 || strcasecmp(buf, "no") == 0 || strcasecmp(buf, "f") == 0 ||
	    strcasecmp(buf, "false") == 0)
		return 0;
	return 1;
}

static int prepend_env(spank_t sp, const char *var, const char *dir)
{
	char *buf = malloc(ENV_BUF);
	char *val = malloc(ENV_BUF + PATH_MAX + 2);
	spank_err_t rc;

	if (buf == NULL || val == NULL) {
		free(buf);
		free(val);
		return -1;
	}
	if (spank_getenv(sp, var, buf, ENV_BUF) == ESPANK_SUCCESS && buf[0] != '\0')
		snprintf(val, ENV_BUF + PATH_MAX + 2, "%s:%s", dir, buf);
	else
		snprintf(val, ENV_BUF + PATH_MAX + 2, "%s", dir);
	rc = spank_setenv(sp, var, val, 1);
	free(buf);
	free(val);
	if (rc != ESPANK_SUCCESS) {
		slurm_error("pyxis: failed to set %s: %s", var, spank_strerror(rc));
		return -1;
	}
	return 0;
}

/*
 * What `unsquashfs` needs to unpack an image (enroot create): a squashfs 4 superblock whose bytes_used
 * fits in the file. Returns NULL when whole, else what is wrong.
 */
static const char *squashfs_problem(int fd, off_t size, char *why, size_t len)
{
	unsigned char sb[96];
	uint64_t used = 0;
	uint16_t major;

	if (pread(fd, sb, sizeof(sb), 0) != (ssize_t)sizeof(sb) || memcmp(sb, "hsqs", 4) != 0) {
		snprintf(why, len, "Can't find a SQUASHFS superblock");
		return why;
	}
	major = (uint16_t)(sb[28] | (sb[29] << 8));
	for (int i = 7; i >= 0; i--)
		used = (used << 8) | sb[40 + i];
	if (major != 4) {
		snprintf(why, len, "unsupported squashfs version %u", major);
		return why;
	}
	if (used > (uint64_t)size) {
		snprintf(why, len, "the squashfs is truncated: its superblock says %llu bytes, the file has %lld",
			 (unsigned long long)used, (long long)size);
		return why;
	}
	return NULL;
}

/* -- the container's environment (user_init) ------------------------------------------------------------------ */

#define IMAGE_ENV_MAX 65536
#define MAX_ENV 512

static char image_env[IMAGE_ENV_MAX]; /* the image's /etc/environment as read; --container-save writes it back */
static size_t image_env_len;
static char container_env_names[4096]; /* --container-env, else PYXIS_CONTAINER_ENV */

/* Is NAME (N bytes) one of the --container-env names? */
static int env_listed(const char *name, size_t n)
{
	for (const char *p = container_env_names; *p; ) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && strncmp(p, name, n) == 0)
			return 1;
		if (end == NULL)
			break;
		p = end + 1;
	}
	return 0;
}

/* Appends what FD gives to image_env, up to its size. */
static void read_into_image_env(int fd)
{
	ssize_t n;

	while (image_env_len < sizeof(image_env) - 1 &&
	       (n = read(fd, image_env + image_env_len, sizeof(image_env) - 1 - image_env_len)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		image_env_len += (size_t)n;
	}
	image_env[image_env_len] = '\0';
}

/*
 * The image's /etc/environment (enroot src/docker.sh docker::configure writes the image's ENV there at import;
 * enroot export keeps it in the squashfs). A docker URI [USER@][REGISTRY#]IMAGE[:TAG] reads
 * STANDINS/images/IMAGE/TAG/etc/environment (absent: the image sets nothing); a squashfs its own etc/environment
 * (unsquashfs -cat, as the user).
 */
static void read_image_env(const char *abs_image)
{
	image_env_len = 0;
	image_env[0] = '\0';
	if (abs_image == NULL) {
		char ref[PATH_MAX], path[PATH_MAX * 2], *name, *p, *tag = "latest";
		int fd;

		snprintf(ref, sizeof(ref), "%s", strncmp(opt_image, "docker://", 9) == 0 ? opt_image + 9 : opt_image);
		name = ref;
		if ((p = strrchr(name, '@')) != NULL)
			name = p + 1;
		if ((p = strchr(name, '#')) != NULL)
			name = p + 1;
		p = strrchr(name, ':');
		if (p != NULL && strchr(p, '/') == NULL) {
			*p = '\0';
			tag = p + 1;
		}
		if (strstr(name, "..") != NULL || strstr(tag, "..") != NULL)
			return;
		snprintf(path, sizeof(path), "%s/images/%s/%s/etc/environment", standins_dir, name, tag);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			read_into_image_env(fd);
			close(fd);
		}
	} else {
		int fds[2];
		pid_t pid;

		if (pipe2(fds, O_CLOEXEC) != 0)
			return;
		pid = fork();
		if (pid == 0) {
			int null = open("/dev/null", O_RDWR);

			dup2(fds[1], 1);
			if (null >= 0) {
				dup2(null, 0);
				dup2(null, 2);
			}
			/* user_init runs with the user's effective uid already; become the user wholly where we can */
			if (geteuid() == 0 &&
			    (setgroups(1, &job_gid) != 0 || setgid(job_gid) != 0 || setuid(job_uid) != 0))
				_exit(126);
			execl("/usr/bin/unsquashfs", "unsquashfs", "-cat", abs_image, "etc/environment", (char *)NULL);
			_exit(127);
		}
		close(fds[1]);
		if (pid > 0) {
			int status;

			read_into_image_env(fds[0]);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
				image_env_len = 0; /* no etc/environment in the image */
				image_env[0] = '\0';
			}
		}
		close(fds[0]);
	}
}

/*
 * The job's environment as Pyxis leaves it for the task (pyxis 0.24 pyxis_slurmstepd.c spank_import_container_env):
 * LANG, LANGUAGE and LC_ALL are removed unless named in --container-env; then every variable of the container's
 * environment is set with overwrite, except the --container-env names (overwrite 0: the job's value stays). The
 * container's environment is enroot's (src/runtime.sh runtime::_do_environ): the image's /etc/environment, its
 * ${VAR}s replaced from the job's environment (common::envsubst), cleaned as common::envfmt does (comments, bad
 * names, ENROOT_*, surrounding quotes), then one NAME=VALUE per --container-env name set non-empty in the job
 * (the environ() function pyxis writes in its start config); later lines win (bin/common.h load_environment).
 */
static int apply_container_env(spank_t sp)
{
	static const char *deny[] = { "LANG", "LANGUAGE", "LC_ALL", NULL };
	static char keys[MAX_ENV][128];
	static char *vals[MAX_ENV];
	char *text = NULL, *line, *rest, *buf = NULL, *value = NULL;
	int nenv = 0, rv = -1;

	for (int i = 0; deny[i] != NULL; i++) {
		if (!env_listed(deny[i], strlen(deny[i])))
			spank_unsetenv(sp, deny[i]);
	}
	text = strdup(image_env);
	buf = malloc(ENV_BUF);
	value = malloc(ENV_BUF);
	if (text == NULL || buf == NULL || value == NULL)
		goto out;
	for (rest = text; (line = strsep(&rest, "\n")) != NULL; ) {
		char *eq, *v;
		size_t klen, len = 0, end;
		int slot;

		while (*line == ' ' || *line == '\t')
			line++;
		if (*line == '#' || *line == '\0')
			continue;
		if (!((*line >= 'A' && *line <= 'Z') || (*line >= 'a' && *line <= 'z') || *line == '_'))
			continue;
		eq = line + strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
		if (*eq != '=' || strncmp(line, "ENROOT_", 7) == 0)
			continue;
		klen = (size_t)(eq - line);
		if (klen >= sizeof(keys[0]))
			continue;
		/* ${NAME} from the job's environment */
		for (v = eq + 1; *v && len < ENV_BUF - 1; ) {
			char *close_brace;

			if (v[0] == '$' && v[1] == '{' && (close_brace = strchr(v + 2, '}')) != NULL &&
			    close_brace > v + 2 && strspn(v + 2, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
			    (size_t)(close_brace - v - 2) && !(v[2] >= '0' && v[2] <= '9')) {
				char name[128];

				snprintf(name, sizeof(name), "%.*s", (int)(close_brace - v - 2), v + 2);
				if (spank_getenv(sp, name, buf, ENV_BUF) == ESPANK_SUCCESS)
					len += (size_t)snprintf(value + len, ENV_BUF - len, "%s", buf);
				if (len >= ENV_BUF)
					len = ENV_BUF - 1;
				v = close_brace + 1;
				continue;
			}
			value[len++] = *v++;
		}
		value[len] = '\0';
		/* surrounding quotes (blanks after the closing one dropped too) */
		for (end = len; end > 0 && (value[end - 1] == ' ' || value[end - 1] == '\t'); end--)
			;
		if (end >= 2 && (value[0] == '"' || value[0] == '\'') && (value[end - 1] == '"' || value[end - 1] == '\'')) {
			value[end - 1] = '\0';
			memmove(value, value + 1, end - 1);
		}
		slot = -1;
		for (int i = 0; i < nenv; i++)
			if (strlen(keys[i]) == klen && strncmp(keys[i], line, klen) == 0)
				slot = i;
		if (slot < 0) {
			if (nenv == MAX_ENV)
				continue;
			slot = nenv++;
			snprintf(keys[slot], sizeof(keys[slot]), "%.*s", (int)klen, line);
			vals[slot] = NULL;
		}
		free(vals[slot]);
		vals[slot] = strdup(value);
		if (vals[slot] == NULL)
			goto out;
	}
	for (int i = 0; i < nenv; i++) {
		int listed = env_listed(keys[i], strlen(keys[i]));
		spank_err_t rc;

		/* a listed name set non-empty in the job: environ() puts the job's value last, and it stays */
		if (listed && spank_getenv(sp, keys[i], buf, ENV_BUF) == ESPANK_SUCCESS && buf[0] != '\0')
			continue;
		rc = spank_setenv(sp, keys[i], vals[i], listed ? 0 : 1);
		if (rc != ESPANK_SUCCESS && rc != ESPANK_ENV_EXISTS) {
			slurm_error("pyxis: failed to set %s: %s", keys[i], spank_strerror(rc));
			goto out;
		}
	}
	rv = 0;
out:
	if (rv < 0 && text != NULL && buf != NULL)
		slurm_error("pyxis: couldn't read container environment");
	for (int i = 0; i < nenv; i++) {
		free(vals[i]);
		vals[i] = NULL;
	}
	free(text);
	free(buf);
	free(value);
	return rv;
}

static int container_setup(spank_t sp);

/*
 * In slurmstepd, once per step, with the job user's effective uid. A failure here would
 * make Slurm 22.05's srun print "launch failed" yet exit 0, so it is reported from
 * task_init instead (the task then exits 1, as with Pyxis versions that set up there).
 */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac; (void)av;
	if (enabled && container_setup(sp) < 0)
		setup_failed = 1;
	if (enabled && started_tasks == NULL) {
		void *shm = mmap(NULL, sizeof(*started_tasks), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

		started_tasks = shm == MAP_FAILED ? NULL : shm;
	}
	return 0;
}

static int container_setup(spank_t sp)
{
	char dir[PATH_MAX];
	int v;

	if (spank_getenv(sp, "PWD", job_pwd, sizeof(job_pwd)) != ESPANK_SUCCESS)
		job_pwd[0] = '\0';
	if (spank_getenv(sp, "HOME", job_home, sizeof(job_home)) != ESPANK_SUCCESS || job_home[0] == '\0') {
		struct passwd *pw = getpwuid(job_uid);

		snprintf(job_home, sizeof(job_home), "%s", pw ? pw->pw_dir : "");
	}
	/* Pyxis's flags first; without them enroot's setting, which the job's environment overrides. */
	v = env_bool(sp, "ENROOT_MOUNT_HOME");
	mount_home = opt_mount_home != -1 ? opt_mount_home : v != -1 ? v : site_mount_home;
	v = env_bool(sp, "ENROOT_ROOTFS_WRITABLE");
	rootfs_writable = opt_writable != -1 ? opt_writable : v != -1 ? v : site_rootfs_writable;

	if (strspn(opt_image, "./") > 0) {
		char abs[PATH_MAX], why[256];
		struct stat st;
		int fd;

		absolute(opt_image, abs, sizeof(abs));
		fd = open(abs, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
			int err = fd < 0 ? errno : EISDIR;

			if (fd >= 0)
				close(fd);
			slurm_error("pyxis: [ERROR] %s: %s", strerror(err), abs);
			slurm_error("pyxis: failed to create container filesystem for image: %s", opt_image);
			return -1;
		}
		if (squashfs_problem(fd, st.st_size, why, sizeof(why)) != NULL) {
			close(fd);
			slurm_error("pyxis: [ERROR] unsquashfs: %s on %s", why, abs);
			slurm_error("pyxis: failed to create container filesystem for image: %s", opt_image);
			return -1;
		}
		close(fd);
		read_image_env(abs);
	} else {
		int delay = read_control_int("pyxis-import-delay", 0);

		slurm_spank_log("pyxis: importing docker image: %s", opt_image);
		if (delay > 0)
			sleep((unsigned int)delay);
		if (control_exists("pyxis-import-fail")) {
			slurm_error("pyxis: [ERROR] URL https://registry-1.docker.io/ returned error code: 503 (stand-in: %s/pyxis-import-fail exists)",
				    control_dir);
			slurm_error("pyxis: failed to import docker image: %s", opt_image);
			return -1;
		}
		slurm_spank_log("pyxis: imported docker image: %s", opt_image);
		read_image_env(NULL);
	}

	/* pyxis_slurmstepd.c validate_mount_sources: absolute sources must exist. */
	for (int i = 0; i < mounts_len; i++) {
		struct stat st;

		if (mounts[i].source[0] != '/')
			continue;
		if (stat(mounts[i].source, &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
			slurm_error("pyxis: --container-mounts: source path does not exist: %s", mounts[i].source);
			slurm_error("pyxis: couldn't create enroot start configuration script");
			return -1;
		}
	}

	/* pyxis args.c pyxis_args_check_environment_variables: PYXIS_CONTAINER_ENV when --container-env is not given */
	container_env_names[0] = '\0';
	if (opt_env != NULL)
		snprintf(container_env_names, sizeof(container_env_names), "%s", opt_env);
	else if (spank_getenv(sp, "PYXIS_CONTAINER_ENV", container_env_names, sizeof(container_env_names)) != ESPANK_SUCCESS)
		container_env_names[0] = '\0';
	if (apply_container_env(sp) < 0)
		return -1;

	snprintf(dir, sizeof(dir), "%s/bin", standins_dir);
	if (prepend_env(sp, "PATH", dir) < 0)
		return -1;
	snprintf(dir, sizeof(dir), "%s/python", standins_dir);
	if (prepend_env(sp, "PYTHONPATH", dir) < 0)
		return -1;
	if (spank_setenv(sp, "GLM_STANDIN_CONTROL", control_dir, 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, "GLM_STANDIN_IMAGE", opt_image, 1) != ESPANK_SUCCESS) {
		slurm_error("pyxis: failed to set the stand-in environment");
		return -1;
	}
	return 0;
}

/* -- the container's filesystem (task_init, as the user) ------------------------------------------------------ */

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

static char hidden[MAX_HIDDEN][PATH_MAX];
static int hidden_len;

/* Is PATH at or under one of the hidden paths (the container's own tmpfs)? */
static int under_hidden(const char *path)
{
	for (int i = 0; i < hidden_len; i++) {
		size_t n = strlen(hidden[i]);

		if (strncmp(path, hidden[i], n) == 0 && (path[n] == '\0' || path[n] == '/'))
			return 1;
	}
	return 0;
}

/* x-create: the target made as a directory (or an empty file for a file source), parents included. */
static int make_target(const char *target, int file)
{
	char buf[PATH_MAX];
	struct stat st;

	if (stat(target, &st) == 0)
		return 0;
	if (!under_hidden(target)) {
		slurm_error("pyxis: [ERROR] stand-in: mount target %s does not exist, and the stand-in creates targets only "
			    "under the container's own paths (%s)", target, hide_arg);
		return -1;
	}
	snprintf(buf, sizeof(buf), "%s", target);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			goto fail;
		*p = '/';
	}
	if (file) {
		int fd = open(buf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

		if (fd < 0)
			goto fail;
		close(fd);
	} else if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
		goto fail;
	}
	return 0;
fail:
	slurm_error("pyxis: [ERROR] could not create mount target %s: %s", target, strerror(errno));
	return -1;
}

static int has_flag(const char *flags, const char *flag)
{
	size_t n = strlen(flag);

	for (const char *p = flags; p && *p; ) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && strncmp(p, flag, n) == 0)
			return 1;
		p = end ? end + 1 : NULL;
	}
	return 0;
}

/* A bind mount made read-only keeps the flags the kernel locked on its source (nosuid, nodev, noexec). */
static unsigned long locked_flags(const char *path)
{
	struct statvfs sv;
	unsigned long f = 0;

	if (statvfs(path, &sv) != 0)
		return 0;
	if (sv.f_flag & ST_NOSUID)
		f |= MS_NOSUID;
	if (sv.f_flag & ST_NODEV)
		f |= MS_NODEV;
	if (sv.f_flag & ST_NOEXEC)
		f |= MS_NOEXEC;
	return f;
}

static int enter_container(void)
{
	int isdir[MAX_MOUNTS + 1];
	int nmounts = mounts_len;
	struct mount_entry all[MAX_MOUNTS + 1];
	char map[64], *dup, *rest, *p, abs[PATH_MAX], stashed[PATH_MAX];
	uid_t uid = getuid();
	gid_t gid = getgid();

	memcpy(all, mounts, sizeof(mounts[0]) * (size_t)mounts_len);
	if (mount_home && job_home[0] == '/') {
		/* enroot conf/hooks/10-home.sh: $HOME at $HOME, read-write */
		all[nmounts].source = job_home;
		all[nmounts].target = job_home;
		all[nmounts].flags = "x-create=dir,bind,rw,nosuid";
		nmounts++;
	}
	for (int i = 0; i < nmounts; i++) {
		struct stat st;

		isdir[i] = 1;
		if (strspn(all[i].source, "./") == 0)
			continue;
		absolute(all[i].source, abs, sizeof(abs));
		if (stat(abs, &st) != 0) {
			slurm_error("pyxis: [ERROR] No such file or directory: %s", abs);
			return -1;
		}
		isdir[i] = S_ISDIR(st.st_mode);
	}

	hidden_len = 0;
	dup = strdup(hide_arg);
	for (rest = dup; dup && (p = strsep(&rest, ":")) != NULL; ) {
		struct stat st;

		if (p[0] == '/' && hidden_len < MAX_HIDDEN && stat(p, &st) == 0 && S_ISDIR(st.st_mode))
			snprintf(hidden[hidden_len++], PATH_MAX, "%s", p);
	}
	free(dup);

	/* a process that dropped root is not dumpable, and then its /proc/self/uid_map belongs to root */
	if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) {
		slurm_error("pyxis: [ERROR] prctl(PR_SET_DUMPABLE): %s", strerror(errno));
		return -1;
	}
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
		slurm_error("pyxis: [ERROR] unshare(user, mount namespaces): %s", strerror(errno));
		return -1;
	}
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	if (write_file("/proc/self/setgroups", "deny") != 0 || write_file("/proc/self/uid_map", map) != 0) {
		slurm_error("pyxis: [ERROR] uid map: %s", strerror(errno));
		return -1;
	}
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	if (write_file("/proc/self/gid_map", map) != 0) {
		slurm_error("pyxis: [ERROR] gid map: %s", strerror(errno));
		return -1;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		slurm_error("pyxis: [ERROR] private mounts: %s", strerror(errno));
		return -1;
	}
	/* The sources are bound to a stash first, while the host's paths are still seen; then the hidden paths are
	 * covered, and the stashed mounts bound at their targets. */
	if (mount("tmpfs", stash_dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") != 0) {
		slurm_error("pyxis: [ERROR] tmpfs on %s (stash=): %s", stash_dir, strerror(errno));
		return -1;
	}
	for (int i = 0; i < nmounts; i++) {
		if (strspn(all[i].source, "./") == 0)
			continue;
		absolute(all[i].source, abs, sizeof(abs));
		snprintf(stashed, sizeof(stashed), "%s/%d", stash_dir, i);
		if ((isdir[i] ? mkdir(stashed, 0700) : close(open(stashed, O_WRONLY | O_CREAT | O_CLOEXEC, 0600))) != 0 ||
		    mount(abs, stashed, NULL, MS_BIND | MS_REC, NULL) != 0) {
			slurm_error("pyxis: [ERROR] Failed to mount: %s: %s", abs, strerror(errno));
			return -1;
		}
	}
	for (int i = 0; i < hidden_len; i++) {
		if (mount("tmpfs", hidden[i], "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4g") != 0) {
			slurm_error("pyxis: [ERROR] tmpfs on %s: %s", hidden[i], strerror(errno));
			return -1;
		}
	}
	for (int i = 0; i < nmounts; i++) {
		const char *target = all[i].target;
		char tgt[PATH_MAX];

		if (target[0] != '/') /* relative targets are taken from the container's root */
			snprintf(tgt, sizeof(tgt), "/%s", target);
		else
			snprintf(tgt, sizeof(tgt), "%s", target);
		if (strcmp(all[i].source, "umount") == 0) {
			if (umount2(tgt, MNT_DETACH) != 0) {
				slurm_error("pyxis: [ERROR] Failed to unmount: %s: %s", tgt, strerror(errno));
				return -1;
			}
			continue;
		}
		if (strcmp(all[i].source, "tmpfs") == 0) {
			if (make_target(tgt, 0) < 0 || mount("tmpfs", tgt, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
				slurm_error("pyxis: [ERROR] Failed to mount: tmpfs on %s: %s", tgt, strerror(errno));
				return -1;
			}
			continue;
		}
		snprintf(stashed, sizeof(stashed), "%s/%d", stash_dir, i);
		if (make_target(tgt, !isdir[i]) < 0)
			return -1;
		if (mount(stashed, tgt, NULL, MS_BIND | MS_REC, NULL) != 0) {
			slurm_error("pyxis: [ERROR] Failed to mount: %s on %s: %s", all[i].source, tgt, strerror(errno));
			return -1;
		}
		if (has_flag(all[i].flags, "ro") &&
		    mount(NULL, tgt, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | locked_flags(tgt), NULL) != 0) {
			slurm_error("pyxis: [ERROR] Failed to mount: %s on %s read-only: %s", all[i].source, tgt,
				    strerror(errno));
			return -1;
		}
	}
	if (umount2(stash_dir, MNT_DETACH) != 0) {
		slurm_error("pyxis: [ERROR] umount %s: %s", stash_dir, strerror(errno));
		return -1;
	}
	/* enroot src/runtime.sh: the container's own filesystem read-only unless ENROOT_ROOTFS_WRITABLE. */
	if (!rootfs_writable) {
		for (int i = 0; i < hidden_len; i++) {
			if (mount(NULL, hidden[i], NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0) {
				slurm_error("pyxis: [ERROR] read-only %s: %s", hidden[i], strerror(errno));
				return -1;
			}
		}
	}
	return 0;
}

/* In the task, as the user, just before exec. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	const char *dir;
	(void)sp; (void)ac; (void)av;

	if (setup_failed)
		return -1;
	if (!enabled)
		return 0;
	if (enter_container() < 0) {
		/* pyxis_slurmstepd.c enroot_container_start: `enroot start` exited non-zero */
		slurm_error("pyxis: container start failed with error code: 1");
		return -1;
	}
	dir = opt_workdir != NULL ? opt_workdir : "/";
	if (chdir(dir) != 0) {
		slurm_error("pyxis: couldn't chdir to %s: %s", dir, strerror(errno));
		return -1;
	}
	if (started_tasks != NULL)
		__atomic_add_fetch(started_tasks, 1, __ATOMIC_SEQ_CST);
	return 0;
}

/* -- --container-save (task_exit, slurmstepd) ------------------------------------------------------------------ */

static int run_wait(char *const argv[])
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/*
 * As the job user (enroot export runs as the user): a squashfs of a small tree naming the image, written by
 * mksquashfs to PATH. Returns 0 or an errno-like code; *partial is set when a file was left at PATH.
 */
static int export_container(const char *path)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return errno;
	if (pid == 0) {
		char tree[] = "/tmp/pyxis-standin-export-XXXXXX";
		char file[PATH_MAX], etc[PATH_MAX], envfile[PATH_MAX];
		struct stat st;
		FILE *f;
		int rc;

		if (setgroups(1, &job_gid) != 0 || setgid(job_gid) != 0 || setuid(job_uid) != 0)
			_exit(EPERM);
		if (mkdtemp(tree) == NULL)
			_exit(errno);
		snprintf(etc, sizeof(etc), "%s/etc", tree);
		snprintf(file, sizeof(file), "%s/etc/glm-standin-image", tree);
		if (mkdir(etc, 0755) != 0 || (f = fopen(file, "w")) == NULL)
			_exit(errno);
		fprintf(f, "pyxis stand-in: a container of %s, saved by job %u step %u (glm.serve test cluster)\n", opt_image,
			job_id, step_id);
		/* some bytes, so that the image has data blocks after its superblock */
		for (int i = 0; i < 2048; i++)
			fprintf(f, "%08x stand-in image data %u.%u\n", (unsigned)i * 2654435761u, job_id, step_id);
		fclose(f);
		/* the rootfs's /etc/environment goes with the container (enroot export squashes the whole rootfs) */
		snprintf(envfile, sizeof(envfile), "%s/etc/environment", tree);
		if (image_env_len > 0) {
			if ((f = fopen(envfile, "w")) == NULL)
				_exit(errno);
			fwrite(image_env, 1, image_env_len, f);
			fclose(f);
		}
		rc = run_wait((char *const[]){ "/usr/bin/mksquashfs", tree, (char *)path, "-noappend", "-all-root",
					      "-no-progress", "-quiet", "-comp", "lzo", "-noD", "-exit-on-error", NULL });
		unlink(file);
		unlink(envfile);
		rmdir(etc);
		rmdir(tree);
		if (rc != 0)
			_exit(rc == 127 ? ENOENT : EIO);
		if (control_exists("pyxis-export-fail") || control_exists("pyxis-export-truncate")) {
			if (stat(path, &st) != 0 || truncate(path, st.st_size / 2) != 0)
				_exit(errno);
			if (control_exists("pyxis-export-fail"))
				_exit(ENOSPC);
		}
		_exit(0);
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return errno;
	}
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return EINTR;
}

/* In slurmstepd (root), for each task as it exits; the last one exports (pyxis: whatever the tasks' status). */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	uint32_t ntasks = 1;
	char abs[PATH_MAX], parent[PATH_MAX], *slash;
	struct stat st;
	int err;
	(void)ac; (void)av;

	if (!enabled || setup_failed)
		return 0;
	spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks);
	if (++tasks_exited < ntasks || opt_save == NULL)
		return 0;
	/* pyxis enroot_export: nothing is exported when a task did not start in its container */
	if (started_tasks != NULL && *started_tasks != ntasks)
		return 0;
	if (opt_save[0] != '/' && job_pwd[0] == '\0') {
		slurm_error("pyxis: container export: relative path used, but job's cwd is unset");
		return -1;
	}
	absolute(opt_save, abs, sizeof(abs));
	snprintf(parent, sizeof(parent), "%s", abs);
	slash = strrchr(parent, '/');
	if (slash != NULL && slash != parent)
		*slash = '\0';
	if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
		err = ENOENT;
	else
		err = export_container(abs);
	if (err != 0) {
		slurm_error("pyxis: [ERROR] %s: %s", err == ENOSPC ? "mksquashfs: Write failed because No space left on device"
							      : strerror(err), abs);
		slurm_error("pyxis: failed to export container pyxis_%u.%u to %s", job_id, step_id, abs);
		return -1;
	}
	slurm_spank_log("pyxis: exported container pyxis_%u.%u to %s", job_id, step_id, abs);
	return 0;
}
