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
 * WHAT IT DOES
 *   - Registers Pyxis's srun options with Pyxis's names, argument kinds and help
 *     texts (--container-image, --container-mounts, --container-workdir,
 *     --container-name, --container-save, --[no-]container-mount-home,
 *     --[no-]container-remap-root, --[no-]container-entrypoint,
 *     --container-entrypoint-log, --container-writable, --container-readonly,
 *     --container-env). The plugin calls itself "pyxis", so the options travel
 *     the same way (SLURM_SPANK__SLURM_SPANK_OPTION_pyxis_*).
 *   - In the step (slurmstepd, user_init, as the job's user): an IMAGE that is a
 *     path must be a readable regular file, else the step fails with Pyxis's
 *     messages ("pyxis: failed to create container filesystem"); a docker URI is
 *     "imported" (instantly, or after the seconds written in
 *     CONTROL/pyxis-import-delay; it fails if CONTROL/pyxis-import-fail exists).
 *     Sources of --container-mounts must exist. --container-workdir is chdir'ed to.
 *   - Container steps only: prepends STANDINS/bin to PATH and STANDINS/python to
 *     PYTHONPATH and sets GLM_STANDIN_CONTROL=CONTROL and GLM_STANDIN_IMAGE=IMAGE,
 *     so tools that live only in the image (hf, sglang) exist only in such steps.
 *     slurmstepd looks the command up in the step's PATH after user_init, so
 *     `srun --container-image=X hf ...` finds STANDINS/bin/hf (srun itself keeps
 *     a bare name it cannot find on the submit host).
 *   - --container-save=PATH: when the last local task of the step has exited
 *     (unless it was killed by a signal), writes PATH as the job's user: a small
 *     text file saying it stands for a squashfs of IMAGE, written to a temporary
 *     name then renamed (atomic). A missing parent folder fails like Pyxis
 *     ("pyxis: failed to export container ...").
 *
 * WHAT IT DOES NOT DO
 *   No container, namespace, mount, image download, squashfs, entrypoint, root
 *   remapping, GPU or environment isolation: the command runs on the host as the
 *   user, with the host's filesystem. --container-name, --container-env,
 *   --[no-]container-mount-home, remap-root, entrypoint and writable/readonly are
 *   accepted and ignored. No sbatch/salloc (allocator) options, no PYXIS_* env
 *   variables, no pyxis config options (only standins= and control=).
 *
 * plugstack.conf:  required /path/pyxis_standin.so standins=DIR control=DIR
 */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(pyxis, 1)

#define ENV_BUF 65536

static char *opt_image;
static char *opt_mounts;
static char *opt_workdir;
static char *opt_name;
static char *opt_save;
static char *opt_env;
static int opt_mount_home = -1;
static int opt_remap_root = -1;
static int opt_entrypoint = -1;
static int opt_entrypoint_log = -1;
static int opt_writable = -1;

static char standins_dir[PATH_MAX] = "/var/lib/glm-cluster/standins";
static char control_dir[PATH_MAX] = "/var/lib/glm-cluster/control";

static int enabled;
static int setup_failed; /* user_init failed: task_init fails the task, so srun exits non-zero */
static uid_t job_uid;
static gid_t job_gid;
static uint32_t job_id;
static uint32_t step_id;
static uint32_t tasks_exited;
static int any_task_signaled;
static char job_pwd[PATH_MAX];

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

static int cb_image(int v, const char *a, int r) { (void)v; (void)r; return set_string(&opt_image, a, "container-image"); }
static int cb_mounts(int v, const char *a, int r) { (void)v; (void)r; return set_string(&opt_mounts, a, "container-mounts"); }
static int cb_workdir(int v, const char *a, int r) { (void)v; (void)r; return set_string(&opt_workdir, a, "container-workdir"); }
static int cb_name(int v, const char *a, int r) { (void)v; (void)r; return set_string(&opt_name, a, "container-name"); }
static int cb_env(int v, const char *a, int r) { (void)v; (void)r; return set_string(&opt_env, a, "container-env"); }

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
	{ "container-mount-home", NULL, "[pyxis] bind mount the user's home directory.", 0, 1, cb_mount_home },
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
		if (opt_mounts || opt_workdir || opt_save || opt_name)
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

static int check_mounts(void)
{
	char *dup, *rest, *entry;
	int rv = 0;

	if (opt_mounts == NULL)
		return 0;
	dup = strdup(opt_mounts);
	if (dup == NULL)
		return -1;
	rest = dup;
	while (rv == 0 && (entry = strsep(&rest, ",")) != NULL) {
		char *src = strsep(&entry, ":");
		char abs[PATH_MAX];
		struct stat st;

		if (src == NULL || *src == '\0') {
			slurm_error("pyxis: --container-mounts: invalid format: %s", opt_mounts);
			rv = -1;
		} else if (strspn(src, "./") > 0) {
			absolute(src, abs, sizeof(abs));
			if (stat(abs, &st) != 0) {
				slurm_error("pyxis: [ERROR] No such file or directory: %s", abs);
				slurm_error("pyxis: couldn't start container");
				rv = -1;
			}
		} else if (strcmp(src, "tmpfs") != 0 && strcmp(src, "umount") != 0) {
			slurm_error("pyxis: mount source must be a relative path, an absolute path, \"tmpfs\" or \"umount\"");
			rv = -1;
		}
	}
	free(dup);
	return rv;
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
	return 0;
}

static int container_setup(spank_t sp)
{
	char dir[PATH_MAX];

	if (spank_getenv(sp, "PWD", job_pwd, sizeof(job_pwd)) != ESPANK_SUCCESS)
		job_pwd[0] = '\0';

	if (strspn(opt_image, "./") > 0) {
		char abs[PATH_MAX];
		struct stat st;
		int fd;

		absolute(opt_image, abs, sizeof(abs));
		fd = open(abs, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
			int err = fd < 0 ? errno : EISDIR;

			if (fd >= 0)
				close(fd);
			slurm_error("pyxis: [ERROR] %s: %s", strerror(err), abs);
			slurm_error("pyxis: failed to create container filesystem");
			slurm_error("pyxis: couldn't start container");
			return -1;
		}
		close(fd);
	} else {
		int delay = read_control_int("pyxis-import-delay", 0);

		slurm_spank_log("pyxis: importing docker image: %s", opt_image);
		if (delay > 0)
			sleep((unsigned int)delay);
		if (control_exists("pyxis-import-fail")) {
			slurm_error("pyxis: [ERROR] URL https://registry-1.docker.io/ returned error code: 503 (stand-in: %s/pyxis-import-fail exists)",
				    control_dir);
			slurm_error("pyxis: failed to import docker image");
			slurm_error("pyxis: couldn't start container");
			return -1;
		}
		slurm_spank_log("pyxis: imported docker image: %s", opt_image);
	}
	if (check_mounts() < 0)
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

/* In the task, as the user, just before exec. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)sp; (void)ac; (void)av;
	if (setup_failed)
		return -1;
	if (!enabled || opt_workdir == NULL)
		return 0;
	if (chdir(opt_workdir) != 0) {
		slurm_error("pyxis: couldn't chdir to %s: %s", opt_workdir, strerror(errno));
		return -1;
	}
	return 0;
}

/* Write the save file as the job user: temp file, then rename. Returns 0 or an errno. */
static int export_container(const char *path)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return errno;
	if (pid == 0) {
		char tmp[PATH_MAX + 64];
		FILE *f;
		int fd;

		if (setgroups(1, &job_gid) != 0 || setgid(job_gid) != 0 || setuid(job_uid) != 0)
			_exit(EPERM);
		snprintf(tmp, sizeof(tmp), "%s.pyxis-standin-%d.tmp", path, (int)getpid());
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			_exit(errno);
		f = fdopen(fd, "w");
		if (f == NULL)
			_exit(errno);
		fprintf(f, "pyxis stand-in: this file stands for a squashfs of the container image %s\n"
			   "saved by job %u step %u (glm.serve test cluster; not a real image)\n",
			opt_image, job_id, step_id);
		if (fflush(f) != 0 || fsync(fd) != 0 || fclose(f) != 0) {
			int err = errno;
			unlink(tmp);
			_exit(err);
		}
		if (rename(tmp, path) != 0) {
			int err = errno;
			unlink(tmp);
			_exit(err);
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

/* In slurmstepd (root), for each task as it exits; the last one exports. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	uint32_t ntasks = 1;
	int status = 0;
	char abs[PATH_MAX];
	int err;
	(void)ac; (void)av;

	if (!enabled || setup_failed)
		return 0;
	if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) == ESPANK_SUCCESS && WIFSIGNALED(status))
		any_task_signaled = 1;
	spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks);
	if (++tasks_exited < ntasks || opt_save == NULL)
		return 0;
	if (any_task_signaled) {
		slurm_info("pyxis: not exporting container: a task was killed by a signal");
		return 0;
	}
	absolute(opt_save, abs, sizeof(abs));
	err = export_container(abs);
	if (err != 0) {
		slurm_error("pyxis: [ERROR] %s: %s", strerror(err), abs);
		slurm_error("pyxis: failed to export container pyxis_%u.%u to %s", job_id, step_id, abs);
		return -1;
	}
	slurm_spank_log("pyxis: exported container pyxis_%u.%u to %s", job_id, step_id, abs);
	return 0;
}
