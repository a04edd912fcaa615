/*
 * A fake libnvidia-ml.so.1 for tests on machines without a GPU.
 *
 * It exports the NVML entry points the sidecar reaches through pynvml (the exact, versioned symbol
 * names pynvml looks up) and keeps its whole state in a small text file named by $FAKE_NVML_STATE:
 * one "key value" pair per line. The file is re-read on every call and rewritten (temp file + rename)
 * after every mutation, so a test in another process controls the GPUs and sees what the sidecar did.
 *
 * Keys (i = GPU index, j = MIG device index):
 *   driver_version, nvml_version, count
 *   gpu.i.uuid .name .bus_id .domain .bus .device .temp .temp_slowdown .temp_shutdown .power_usage
 *   gpu.i.power_limit .default_limit .min_limit .max_limit (milliwatts) .ecc_mode
 *   gpu.i.ecc.volatile.corrected .ecc.volatile.uncorrected .ecc.aggregate.corrected .ecc.aggregate.uncorrected
 *   gpu.i.remap.correctable .remap.uncorrectable .remap.pending .remap.failure .retired_pages
 *   gpu.i.mig_mode .mig.count .mig.j.uuid .mig.j.gi (GPU instance id of MIG device j; default j + 1)
 *   gpu.i.procs          "pid:bytes,pid:bytes"
 *   gpu.i.persistence    persistence mode (1 on, default 0); gpu.i.minor: the /dev/nvidia<minor> number (default i)
 *   gpu.i.drain .removed .lost_after_reset .ecc_after_reset
 *   gpu.i.lost           1: every call on GPU i answers NVML_ERROR_GPU_IS_LOST (it stays listed)
 *   gpu.i.temp_mem_max .temp_gpu_max (PCIe keys: see the validation gate section)
 *   gpu.i.serial .board_part_number .vbios   board identity (defaults derived from i; make one unreadable
 *                        with err.nvmlDeviceGetSerial.i 3 and the like)
 *   gpu.i.field.<id>     value of NVML field <id> (nvmlDeviceGetFieldValues; absent: NOT_SUPPORTED)
 *   gpu.i.events         event types nvmlDeviceGetSupportedEventTypes reports (default Xid critical, 8)
 *   $FAKE_NVML_STATE.events   one NVML event per line, "<gpu> <xid>", appended by tests: an event set
 *                        delivers the lines added after it was created, each once
 *   err.<function>       NVML return code for every call of that function
 *   err.<function>.i     the same, for GPU i only
 *   calls.<function>     incremented by the fake on every mutating call
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define MAX_KV 1024
#define KEY_LEN 128
#define VAL_LEN 1024
#define GPU_BASE 0x1000
#define MIG_BASE 0x100000
#define MIG_PER_GPU 64

typedef void *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int version;
    int sensorType;
    int temperature;
} nvmlTemperature_t;

/* The state as last read. The sidecar calls NVML from several threads (request handlers, the detector),
 * as the real library allows: a reader must never see the table half reloaded, so `load` parses into a
 * scratch table and swaps it in under `kv_lock`, and `get` hands out a thread-local copy of the value. */
static char keys[MAX_KV][KEY_LEN];
static char vals[MAX_KV][VAL_LEN];
static int nkv;
static char next_keys[MAX_KV][KEY_LEN];
static char next_vals[MAX_KV][VAL_LEN];
static int init_count;
static pthread_mutex_t kv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
#define GET_RING 16
static __thread char got[GET_RING][VAL_LEN];
static __thread int got_next;

static void load(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    char line[KEY_LEN + VAL_LEN + 4];
    int n = 0;
    pthread_mutex_lock(&load_lock);
    FILE *f = path ? fopen(path, "r") : NULL;
    if (f) {
        while (n < MAX_KV && fgets(line, sizeof line, f)) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            char *space = strchr(line, ' ');
            if (!space || space == line) continue;
            *space = 0;
            snprintf(next_keys[n], KEY_LEN, "%.127s", line);
            snprintf(next_vals[n], VAL_LEN, "%.1023s", space + 1);
            n++;
        }
        fclose(f);
    }
    pthread_mutex_lock(&kv_lock);
    for (int i = 0; i < n; i++) {
        memcpy(keys[i], next_keys[i], KEY_LEN);
        memcpy(vals[i], next_vals[i], VAL_LEN);
    }
    nkv = n;
    pthread_mutex_unlock(&kv_lock);
    pthread_mutex_unlock(&load_lock);
}

static void save(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    char tmp[4096];
    if (!path) return;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.%lu", path, (int)getpid(), (unsigned long)pthread_self());
    pthread_mutex_lock(&kv_lock);
    FILE *f = fopen(tmp, "w");
    if (f) {
        for (int i = 0; i < nkv; i++) fprintf(f, "%s %s\n", keys[i], vals[i]);
        fclose(f);
        rename(tmp, path);
    }
    pthread_mutex_unlock(&kv_lock);
}

static const char *get(const char *key) {
    const char *found = NULL;
    pthread_mutex_lock(&kv_lock);
    for (int i = 0; i < nkv; i++)
        if (strcmp(keys[i], key) == 0) {
            char *copy = got[got_next];
            got_next = (got_next + 1) % GET_RING;
            snprintf(copy, VAL_LEN, "%s", vals[i]);
            found = copy;
            break;
        }
    pthread_mutex_unlock(&kv_lock);
    return found;
}

static void set(const char *key, const char *value) {
    pthread_mutex_lock(&kv_lock);
    int done = 0;
    for (int i = 0; i < nkv && !done; i++)
        if (strcmp(keys[i], key) == 0) {
            snprintf(vals[i], VAL_LEN, "%s", value);
            done = 1;
        }
    if (!done && nkv < MAX_KV) {
        snprintf(keys[nkv], KEY_LEN, "%s", key);
        snprintf(vals[nkv], VAL_LEN, "%s", value);
        nkv++;
    }
    pthread_mutex_unlock(&kv_lock);
}

static long long num(const char *key, long long fallback) {
    const char *v = get(key);
    return v ? strtoll(v, NULL, 10) : fallback;
}

static long long gnum(int gpu, const char *field, long long fallback) {
    char key[KEY_LEN];
    snprintf(key, sizeof key, "gpu.%d.%s", gpu, field);
    return num(key, fallback);
}

static const char *gstr(int gpu, const char *field) {
    char key[KEY_LEN];
    snprintf(key, sizeof key, "gpu.%d.%s", gpu, field);
    return get(key);
}

static void gset(int gpu, const char *field, long long value) {
    char key[KEY_LEN], v[32];
    snprintf(key, sizeof key, "gpu.%d.%s", gpu, field);
    snprintf(v, sizeof v, "%lld", value);
    set(key, v);
}

static void count_call(const char *fn) {
    char key[KEY_LEN], v[32];
    snprintf(key, sizeof key, "calls.%s", fn);
    snprintf(v, sizeof v, "%lld", num(key, 0) + 1);
    set(key, v);
}

/* Loads the state and returns the injected error for fn (and GPU gpu, -1 for none), else 0. */
static int enter(const char *fn, int gpu) {
    char key[KEY_LEN];
    long long e;
    load();
    if (gpu >= 0) {
        snprintf(key, sizeof key, "err.%s.%d", fn, gpu);
        if ((e = num(key, 0)) != 0) return (int)e;
        snprintf(key, sizeof key, "gpu.%d.lost", gpu);
        if (num(key, 0) != 0 && init_count > 0) return 15; /* NVML_ERROR_GPU_IS_LOST */
    }
    snprintf(key, sizeof key, "err.%s", fn);
    if ((e = num(key, 0)) != 0) return (int)e;
    return init_count > 0 ? 0 : NVML_ERROR_UNINITIALIZED;
}

static int gpu_count(void) { return (int)num("count", 0); }

static int present(int gpu) { return gpu >= 0 && gpu < gpu_count() && gnum(gpu, "removed", 0) == 0; }

static int gpu_of(nvmlDevice_t d) {
    uintptr_t h = (uintptr_t)d;
    if (h >= GPU_BASE && h < GPU_BASE + 256) return (int)(h - GPU_BASE);
    if (h >= MIG_BASE) return (int)((h - MIG_BASE) / MIG_PER_GPU);
    return -1;
}

static int is_mig(nvmlDevice_t d) { return (uintptr_t)d >= MIG_BASE; }

static int gpu_by_bus_id(const nvmlPciInfo_t *pci) {
    for (int i = 0; i < gpu_count(); i++) {
        const char *b = gstr(i, "bus_id");
        if (b && pci && strcmp(b, pci->busId) == 0) return i;
    }
    return -1;
}

static int copy_str(char *dst, unsigned int len, const char *src) {
    if (!src) src = "";
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

#define ENTER_DEVICE(fn, dev)              \
    int g = gpu_of(dev);                   \
    int rc = enter(fn, g);                 \
    if (rc) return rc;                     \
    if (!present(g)) return NVML_ERROR_NOT_FOUND

/* ---- library ---------------------------------------------------------------------------------- */

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    load();
    long long e = num("err.nvmlInitWithFlags", 0);
    if (e) return (int)e;
    init_count++;
    return NVML_SUCCESS;
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

int nvmlShutdown(void) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(int result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    int rc = enter("nvmlSystemGetDriverVersion", -1);
    if (rc) return rc;
    const char *v = get("driver_version");
    return copy_str(version, length, v ? v : "580.159.04");
}

int nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    int rc = enter("nvmlSystemGetNVMLVersion", -1);
    if (rc) return rc;
    const char *v = get("nvml_version");
    return copy_str(version, length, v ? v : "13.580.159.04");
}

/* ---- devices ---------------------------------------------------------------------------------- */

int nvmlDeviceGetCount_v2(unsigned int *count) {
    int rc = enter("nvmlDeviceGetCount_v2", -1);
    if (rc) return rc;
    int n = 0;
    for (int i = 0; i < gpu_count(); i++) n += present(i);
    *count = (unsigned int)n;
    return NVML_SUCCESS;
}

/* Indexes count present GPUs only, as after a real GPU removal. */
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    int rc = enter("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (rc) return rc;
    unsigned int seen = 0;
    for (int i = 0; i < gpu_count(); i++) {
        if (!present(i)) continue;
        if (seen++ == index) {
            *device = (nvmlDevice_t)(uintptr_t)(GPU_BASE + i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    int rc = enter("nvmlDeviceGetHandleByUUID", -1);
    if (rc) return rc;
    for (int i = 0; i < gpu_count(); i++) {
        const char *u = gstr(i, "uuid");
        if (present(i) && u && uuid && strcmp(u, uuid) == 0) {
            *device = (nvmlDevice_t)(uintptr_t)(GPU_BASE + i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

int nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    ENTER_DEVICE("nvmlDeviceGetIndex", device);
    unsigned int seen = 0;
    for (int i = 0; i < g; i++) seen += present(i);
    *index = seen;
    return NVML_SUCCESS;
}

int nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    ENTER_DEVICE("nvmlDeviceGetUUID", device);
    if (is_mig(device)) {
        char key[KEY_LEN];
        int j = (int)(((uintptr_t)device - MIG_BASE) % MIG_PER_GPU);
        snprintf(key, sizeof key, "gpu.%d.mig.%d.uuid", g, j);
        return copy_str(uuid, length, get(key));
    }
    return copy_str(uuid, length, gstr(g, "uuid"));
}

int nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER_DEVICE("nvmlDeviceGetName", device);
    const char *n = gstr(g, "name");
    return copy_str(name, length, n ? n : "NVIDIA H200");
}

int nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    ENTER_DEVICE("nvmlDeviceGetPciInfo_v3", device);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", gstr(g, "bus_id") ? gstr(g, "bus_id") : "");
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%.15s", pci->busId);
    pci->domain = (unsigned int)gnum(g, "domain", 0);
    pci->bus = (unsigned int)gnum(g, "bus", g + 1);
    pci->device = 0;
    pci->pciDeviceId = 0x233510de;
    return NVML_SUCCESS;
}

/* ---- board identity (serial, part number, VBIOS) ---------------------------------------------- */

int nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    ENTER_DEVICE("nvmlDeviceGetSerial", device);
    char fallback[32];
    snprintf(fallback, sizeof fallback, "1654923%06d", g);
    const char *v = gstr(g, "serial");
    return copy_str(serial, length, v ? v : fallback);
}

int nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length) {
    ENTER_DEVICE("nvmlDeviceGetBoardPartNumber", device);
    const char *v = gstr(g, "board_part_number");
    return copy_str(partNumber, length, v ? v : "692-2G520-0280-000");
}

int nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length) {
    ENTER_DEVICE("nvmlDeviceGetVbiosVersion", device);
    const char *v = gstr(g, "vbios");
    return copy_str(version, length, v ? v : "96.00.AF.00.01");
}

/* ---- health ----------------------------------------------------------------------------------- */

int nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temp) {
    ENTER_DEVICE("nvmlDeviceGetTemperatureV", device);
    if (temp->version != 0x100000C) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    temp->temperature = (int)gnum(g, "temp", 40);
    return NVML_SUCCESS;
}

int nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    (void)sensor;
    ENTER_DEVICE("nvmlDeviceGetTemperature", device);
    *temp = (unsigned int)gnum(g, "temp", 40);
    return NVML_SUCCESS;
}

int nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int threshold, unsigned int *temp) {
    ENTER_DEVICE("nvmlDeviceGetTemperatureThreshold", device);
    if (threshold == 0) *temp = (unsigned int)gnum(g, "temp_shutdown", 95);
    else if (threshold == 1) *temp = (unsigned int)gnum(g, "temp_slowdown", 89);
    else if (threshold == 2) *temp = (unsigned int)gnum(g, "temp_mem_max", 95);
    else if (threshold == 3) *temp = (unsigned int)gnum(g, "temp_gpu_max", 87);
    else return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

int nvmlDeviceGetEccMode(nvmlDevice_t device, int *current, int *pending) {
    ENTER_DEVICE("nvmlDeviceGetEccMode", device);
    *current = *pending = (int)gnum(g, "ecc_mode", 1);
    return NVML_SUCCESS;
}

int nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType, unsigned long long *count) {
    ENTER_DEVICE("nvmlDeviceGetTotalEccErrors", device);
    char field[64];
    snprintf(field, sizeof field, "ecc.%s.%s", counterType == 0 ? "volatile" : "aggregate",
             errorType == 0 ? "corrected" : "uncorrected");
    *count = (unsigned long long)gnum(g, field, 0);
    return NVML_SUCCESS;
}

int nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                              unsigned int *failure) {
    ENTER_DEVICE("nvmlDeviceGetRemappedRows", device);
    *corr = (unsigned int)gnum(g, "remap.correctable", 0);
    *unc = (unsigned int)gnum(g, "remap.uncorrectable", 0);
    *pending = (unsigned int)gnum(g, "remap.pending", 0);
    *failure = (unsigned int)gnum(g, "remap.failure", 0);
    return NVML_SUCCESS;
}

int nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *count, unsigned long long *addresses) {
    (void)cause;
    ENTER_DEVICE("nvmlDeviceGetRetiredPages", device);
    unsigned int n = (unsigned int)gnum(g, "retired_pages", 0);
    if (addresses == NULL || *count < n) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) addresses[i] = 0x1000ULL * (i + 1);
    *count = n;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    ENTER_DEVICE("nvmlDeviceGetMigMode", device);
    *current = *pending = (unsigned int)gnum(g, "mig_mode", 0);
    return NVML_SUCCESS;
}

int nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    ENTER_DEVICE("nvmlDeviceGetMaxMigDeviceCount", device);
    *count = gnum(g, "mig_mode", 0) ? 7 : 0;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    ENTER_DEVICE("nvmlDeviceGetMigDeviceHandleByIndex", device);
    if (index >= (unsigned int)gnum(g, "mig.count", 0)) return NVML_ERROR_NOT_FOUND;
    *mig = (nvmlDevice_t)(uintptr_t)(MIG_BASE + (uintptr_t)g * MIG_PER_GPU + index);
    return NVML_SUCCESS;
}

int nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    ENTER_DEVICE("nvmlDeviceGetGpuInstanceId", device);
    if (!is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;  /* NVML: only a MIG device handle has one */
    char field[KEY_LEN];
    int j = (int)(((uintptr_t)device - MIG_BASE) % MIG_PER_GPU);
    snprintf(field, sizeof field, "mig.%d.gi", j);
    *id = (unsigned int)gnum(g, field, j + 1);
    return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos) {
    ENTER_DEVICE("nvmlDeviceGetComputeRunningProcesses_v3", device);
    unsigned int pids[64];
    unsigned long long mem[64];
    unsigned int n = 0;
    const char *p = gstr(g, "procs");
    while (p && *p && n < 64) {
        char *end;
        pids[n] = (unsigned int)strtoul(p, &end, 10);
        mem[n] = *end == ':' ? strtoull(end + 1, &end, 10) : 0;
        n++;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
    if (infos == NULL || *count < n) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        infos[i].pid = pids[i];
        infos[i].usedGpuMemory = mem[i];
        infos[i].gpuInstanceId = 0xFFFFFFFF;
        infos[i].computeInstanceId = 0xFFFFFFFF;
    }
    *count = n;
    return NVML_SUCCESS;
}

/* ---- power (milliwatts) ----------------------------------------------------------------------- */

int nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    ENTER_DEVICE("nvmlDeviceGetPowerUsage", device);
    *power = (unsigned int)gnum(g, "power_usage", 120000);
    return NVML_SUCCESS;
}

int nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    ENTER_DEVICE("nvmlDeviceGetPowerManagementLimit", device);
    *limit = (unsigned int)gnum(g, "power_limit", 700000);
    return NVML_SUCCESS;
}

int nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *limit) {
    ENTER_DEVICE("nvmlDeviceGetPowerManagementDefaultLimit", device);
    *limit = (unsigned int)gnum(g, "default_limit", 700000);
    return NVML_SUCCESS;
}

int nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *low, unsigned int *high) {
    ENTER_DEVICE("nvmlDeviceGetPowerManagementLimitConstraints", device);
    *low = (unsigned int)gnum(g, "min_limit", 200000);
    *high = (unsigned int)gnum(g, "max_limit", 700000);
    return NVML_SUCCESS;
}

int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    ENTER_DEVICE("nvmlDeviceGetEnforcedPowerLimit", device);
    *limit = (unsigned int)gnum(g, "power_limit", 700000);
    return NVML_SUCCESS;
}

int nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit) {
    ENTER_DEVICE("nvmlDeviceSetPowerManagementLimit", device);
    if (limit < (unsigned int)gnum(g, "min_limit", 200000) || limit > (unsigned int)gnum(g, "max_limit", 700000))
        return NVML_ERROR_INVALID_ARGUMENT;
    gset(g, "power_limit", limit);
    count_call("nvmlDeviceSetPowerManagementLimit");
    save();
    return NVML_SUCCESS;
}

/* ---- persistence mode, minor number (gpu.i.persistence: 1 on; gpu.i.minor: /dev/nvidia<minor>) ---------- */

int nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode) {
    ENTER_DEVICE("nvmlDeviceGetPersistenceMode", device);
    *mode = (int)gnum(g, "persistence", 0);
    return NVML_SUCCESS;
}

int nvmlDeviceSetPersistenceMode(nvmlDevice_t device, int mode) {
    ENTER_DEVICE("nvmlDeviceSetPersistenceMode", device);
    gset(g, "persistence", mode ? 1 : 0);
    count_call("nvmlDeviceSetPersistenceMode");
    save();
    return NVML_SUCCESS;
}

int nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    ENTER_DEVICE("nvmlDeviceGetMinorNumber", device);
    *minor = (unsigned int)gnum(g, "minor", g);
    return NVML_SUCCESS;
}

/* ---- drain / remove / rediscover -------------------------------------------------------------- */

int nvmlDeviceModifyDrainState(nvmlPciInfo_t *pci, int newState) {
    int g = gpu_by_bus_id(pci);
    int rc = enter("nvmlDeviceModifyDrainState", g);
    if (rc) return rc;
    if (g < 0) return NVML_ERROR_NOT_FOUND;
    gset(g, "drain", newState);
    count_call("nvmlDeviceModifyDrainState");
    save();
    return NVML_SUCCESS;
}

int nvmlDeviceQueryDrainState(nvmlPciInfo_t *pci, int *state) {
    int g = gpu_by_bus_id(pci);
    int rc = enter("nvmlDeviceQueryDrainState", g);
    if (rc) return rc;
    if (g < 0) return NVML_ERROR_NOT_FOUND;
    *state = (int)gnum(g, "drain", 0);
    return NVML_SUCCESS;
}

int nvmlDeviceRemoveGpu_v2(nvmlPciInfo_t *pci, int gpuState, int linkState) {
    (void)gpuState;
    (void)linkState;
    int g = gpu_by_bus_id(pci);
    int rc = enter("nvmlDeviceRemoveGpu_v2", g);
    if (rc) return rc;
    if (g < 0 || !present(g)) return NVML_ERROR_NOT_FOUND;
    if (gnum(g, "drain", 0) != 1) return NVML_ERROR_INVALID_ARGUMENT;
    gset(g, "removed", 1);
    count_call("nvmlDeviceRemoveGpu_v2");
    save();
    return NVML_SUCCESS;
}

int nvmlDeviceRemoveGpu(nvmlPciInfo_t *pci) { return nvmlDeviceRemoveGpu_v2(pci, 0, 0); }

int nvmlDeviceDiscoverGpus(nvmlPciInfo_t *pci) {
    int g = gpu_by_bus_id(pci);
    int rc = enter("nvmlDeviceDiscoverGpus", g);
    if (rc) return rc;
    count_call("nvmlDeviceDiscoverGpus");
    if (g >= 0 && gnum(g, "removed", 0) && !gnum(g, "lost_after_reset", 0)) {
        gset(g, "removed", 0);
        gset(g, "drain", 0);
        gset(g, "ecc.volatile.corrected", 0);
        gset(g, "ecc.volatile.uncorrected", gnum(g, "ecc_after_reset", 0));
    }
    save();
    return NVML_SUCCESS;
}

/* ---- validation gate: PCIe link, clock events, field values, retired-page status -------------- */
/*
 * Keys (defaults are what an idle H200 reports):
 *   gpu.i.pcie.gen .pcie.gen_max .pcie.gpu_gen_max (5)   gpu.i.pcie.width .pcie.width_max (16)
 *   gpu.i.clock_events   bit mask of nvmlClocksEventReason* (1 = GPU idle)
 *   gpu.i.recovery_action   NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (0 none .. 4 drain and reset; "unsupported":
 *                           NOT_SUPPORTED, as on drivers before the field existed)
 *   gpu.i.retired_pending   nvmlDeviceGetRetiredPagesPendingStatus (h200_state makes it NOT_SUPPORTED)
 *   gpu.i.nvlinks        NVLinks of GPU i (default 0: no NVLink, every NVLink call answers NOT_SUPPORTED); also
 *                        answers NVML_FI_DEV_NVLINK_LINK_COUNT unless gpu.i.field.91 says otherwise
 *   gpu.i.nvlink.L.state    1 active (default), 0 down, "unsupported": NOT_SUPPORTED for that link
 *   gpu.i.nvlink.L.<counter>  replay, recovery, crc_flit, crc_data, ecc_data (nvmlNvLinkErrorCounter_t 0-4):
 *                        the count (default 0), or "unsupported": NOT_SUPPORTED for that counter
 *   A link at or past gpu.i.nvlinks answers INVALID_ARGUMENT, as the driver does for a link the GPU lacks.
 */

#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230
#define NVML_FI_DEV_NVLINK_LINK_COUNT 91
#define NVML_VALUE_TYPE_UNSIGNED_INT 1

/* ---- node detector: PCI lookup, Xid event sets (PCIe link and field values above serve both) ------------------------ */

#define NVML_ERROR_TIMEOUT 10
#define EVENT_XID_CRITICAL 0x8ULL
#define MAX_EVENT_SETS 16

static int hexeq(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = *a >= 'a' && *a <= 'f' ? (char)(*a - 32) : *a;
        char y = *b >= 'a' && *b <= 'f' ? (char)(*b - 32) : *b;
        if (x != y) return 0;
    }
    return *a == *b;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *device) {
    int rc = enter("nvmlDeviceGetHandleByPciBusId_v2", -1);
    if (rc) return rc;
    for (int i = 0; i < gpu_count(); i++) {
        const char *b = gstr(i, "bus_id");
        if (present(i) && b && busId && hexeq(b, busId)) {
            if (gnum(i, "lost", 0)) return 15;
            *device = (nvmlDevice_t)(uintptr_t)(GPU_BASE + i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}


typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    unsigned int valueType;
    unsigned int nvmlReturn;
    union {
        double dVal;
        unsigned int uiVal;
        unsigned long ulVal;
        unsigned long long ullVal;
        long long sllVal;
        int siVal;
        unsigned short usVal;
    } value;
} nvmlFieldValue_t;

int nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    ENTER_DEVICE("nvmlDeviceGetCurrPcieLinkGeneration", device);
    *gen = (unsigned int)gnum(g, "pcie.gen", 5);
    return NVML_SUCCESS;
}

int nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    ENTER_DEVICE("nvmlDeviceGetMaxPcieLinkGeneration", device);
    *gen = (unsigned int)gnum(g, "pcie.gen_max", 5);
    return NVML_SUCCESS;
}

int nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    ENTER_DEVICE("nvmlDeviceGetGpuMaxPcieLinkGeneration", device);
    *gen = (unsigned int)gnum(g, "pcie.gpu_gen_max", 5);
    return NVML_SUCCESS;
}

int nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
    ENTER_DEVICE("nvmlDeviceGetCurrPcieLinkWidth", device);
    *width = (unsigned int)gnum(g, "pcie.width", 16);
    return NVML_SUCCESS;
}

int nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
    ENTER_DEVICE("nvmlDeviceGetMaxPcieLinkWidth", device);
    *width = (unsigned int)gnum(g, "pcie.width_max", 16);
    return NVML_SUCCESS;
}

int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    ENTER_DEVICE("nvmlDeviceGetCurrentClocksEventReasons", device);
    *reasons = (unsigned long long)gnum(g, "clock_events", 1);
    return NVML_SUCCESS;
}

int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *pending) {
    ENTER_DEVICE("nvmlDeviceGetRetiredPagesPendingStatus", device);
    *pending = (int)gnum(g, "retired_pending", 0);
    return NVML_SUCCESS;
}

/* Fills every entry; a field the fake does not know gets nvmlReturn NOT_SUPPORTED, as the driver does. */
int nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    ENTER_DEVICE("nvmlDeviceGetFieldValues", device);
    if (count < 0 || (count > 0 && values == NULL)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        values[i].timestamp = 0;
        values[i].latencyUsec = 0;
        char field[64];
        snprintf(field, sizeof field, "field.%u", values[i].fieldId);
        const char *v = gstr(g, field);
        if (!v && values[i].fieldId == NVML_FI_DEV_NVLINK_LINK_COUNT) v = gstr(g, "nvlinks");
        const char *ra = gstr(g, "recovery_action");
        int ra_supported = !(ra && strcmp(ra, "unsupported") == 0);
        if (v || (values[i].fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION && ra_supported)) {
            values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            values[i].value.ullVal = 0;
            values[i].value.uiVal = v ? (unsigned int)strtoul(v, NULL, 10)
                                      : (unsigned int)gnum(g, "recovery_action", 0);
            values[i].nvmlReturn = NVML_SUCCESS;
        } else {
            values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

static const char *const NVLINK_COUNTERS[] = {"replay", "recovery", "crc_flit", "crc_data", "ecc_data"};

/* NOT_SUPPORTED without NVLink, INVALID_ARGUMENT for a link the GPU lacks, else 0; `state` gets the link's key. */
static int nvlink_check(int g, unsigned int link, const char *field, const char **value) {
    char key[64];
    long long links = gnum(g, "nvlinks", 0);
    if (links <= 0) return NVML_ERROR_NOT_SUPPORTED;
    if ((long long)link >= links) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(key, sizeof key, "nvlink.%u.state", link);
    const char *state = gstr(g, key);
    if (state && strcmp(state, "unsupported") == 0) return NVML_ERROR_NOT_SUPPORTED;
    snprintf(key, sizeof key, "nvlink.%u.%s", link, field);
    *value = gstr(g, key);
    if (*value && strcmp(*value, "unsupported") == 0) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

int nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *isActive) {
    ENTER_DEVICE("nvmlDeviceGetNvLinkState", device);
    if (!isActive) return NVML_ERROR_INVALID_ARGUMENT;
    const char *v = NULL;
    if ((rc = nvlink_check(g, link, "state", &v))) return rc;
    *isActive = v ? (int)strtol(v, NULL, 10) : 1;
    return NVML_SUCCESS;
}

int nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, int counter,
                                    unsigned long long *counterValue) {
    ENTER_DEVICE("nvmlDeviceGetNvLinkErrorCounter", device);
    if (!counterValue || counter < 0 || counter > 4) return NVML_ERROR_INVALID_ARGUMENT;
    const char *v = NULL;
    if ((rc = nvlink_check(g, link, NVLINK_COUNTERS[counter], &v))) return rc;
    *counterValue = v ? strtoull(v, NULL, 10) : 0;
    return NVML_SUCCESS;
}

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

static struct {
    int used;
    long consumed;            /* event lines of the events file already delivered (or older than the set) */
    unsigned int registered;  /* bit i: GPU i registered for Xid events */
} event_sets[MAX_EVENT_SETS];

static long read_event_line(long wanted, int *gpu, unsigned long long *xid) {
    /* Returns the number of lines in the events file; fills gpu/xid with line `wanted` when it exists. */
    const char *state = getenv("FAKE_NVML_STATE");
    char path[4096], line[128];
    long n = 0;
    if (!state) return 0;
    snprintf(path, sizeof path, "%s.events", state);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n')) break; /* a line still being written */
        if (n == wanted && gpu && xid) sscanf(line, "%d %llu", gpu, xid);
        n++;
    }
    fclose(f);
    return n;
}

int nvmlEventSetCreate(void **set) {
    int rc = enter("nvmlEventSetCreate", -1);
    if (rc) return rc;
    for (int i = 0; i < MAX_EVENT_SETS; i++) {
        if (!event_sets[i].used) {
            event_sets[i].used = 1;
            event_sets[i].registered = 0;
            event_sets[i].consumed = read_event_line(-1, NULL, NULL);
            *set = (void *)(uintptr_t)(i + 1);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_UNKNOWN;
}

int nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    ENTER_DEVICE("nvmlDeviceGetSupportedEventTypes", device);
    *types = (unsigned long long)gnum(g, "events", (long long)EVENT_XID_CRITICAL);
    return NVML_SUCCESS;
}

int nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, void *set) {
    ENTER_DEVICE("nvmlDeviceRegisterEvents", device);
    int s = (int)(uintptr_t)set - 1;
    if (s < 0 || s >= MAX_EVENT_SETS || !event_sets[s].used) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~(unsigned long long)gnum(g, "events", (long long)EVENT_XID_CRITICAL)) return NVML_ERROR_NOT_SUPPORTED;
    if (types & EVENT_XID_CRITICAL) event_sets[s].registered |= 1u << g;
    return NVML_SUCCESS;
}

int nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned int timeoutms) {
    int s = (int)(uintptr_t)set - 1;
    if (s < 0 || s >= MAX_EVENT_SETS || !event_sets[s].used) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int waited = 0;; waited += 20) {
        int rc = enter("nvmlEventSetWait_v2", -1);
        if (rc) return rc;
        int gpu = -1;
        unsigned long long xid = 0;
        long lines = read_event_line(event_sets[s].consumed, &gpu, &xid);
        if (lines > event_sets[s].consumed) {
            event_sets[s].consumed++;
            if (gpu >= 0 && gpu < 32 && (event_sets[s].registered & (1u << gpu))) {
                memset(data, 0, sizeof *data);
                data->device = (nvmlDevice_t)(uintptr_t)(GPU_BASE + gpu);
                data->eventType = EVENT_XID_CRITICAL;
                data->eventData = xid;
                data->gpuInstanceId = 0xFFFFFFFF;
                data->computeInstanceId = 0xFFFFFFFF;
                return NVML_SUCCESS;
            }
            continue;
        }
        if (waited >= timeoutms) return NVML_ERROR_TIMEOUT;
        usleep(20000);
    }
}

int nvmlEventSetFree(void *set) {
    int s = (int)(uintptr_t)set - 1;
    if (s < 0 || s >= MAX_EVENT_SETS || !event_sets[s].used) return NVML_ERROR_INVALID_ARGUMENT;
    event_sets[s].used = 0;
    return NVML_SUCCESS;
}
