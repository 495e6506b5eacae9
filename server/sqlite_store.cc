// The SQLite implementation of Store: WAL journal, one connection, one transaction per
// method, schema migrations keyed by a version table. Protos are stored as serialized
// blobs next to the columns that queries filter on.
#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/store.h"

namespace paratune::server {
namespace {

// Migration i takes the schema from version i to i + 1.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  state INTEGER NOT NULL,
  job BLOB NOT NULL,
  modelled BLOB,
  results BLOB
);
CREATE TABLE tasks (
  id TEXT PRIMARY KEY,
  job_id TEXT NOT NULL,
  state INTEGER NOT NULL,
  task BLOB NOT NULL,
  result BLOB
);
CREATE INDEX tasks_by_job ON tasks(job_id);
CREATE TABLE profile_cache (
  device_kind TEXT NOT NULL,
  key TEXT NOT NULL,
  result BLOB NOT NULL,
  PRIMARY KEY (device_kind, key)
);
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kStoreSchemaVersion);

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  bool ok() const { return rc_ == SQLITE_OK; }
  void BindText(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void BindBlob(int i, const std::string& s) {
    sqlite3_bind_blob(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void BindNull(int i) { sqlite3_bind_null(stmt_, i); }
  void BindInt(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  int Step() { return sqlite3_step(stmt_); }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  bool IsNull(int col) { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Blob(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    const int n = sqlite3_column_bytes(stmt_, col);
    return p == nullptr ? std::string() : std::string(static_cast<const char*>(p), n);
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

std::string Serialize(const google::protobuf::MessageLite& m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

class SqliteStore final : public Store {
 public:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  ~SqliteStore() override { sqlite3_close(db_); }

  absl::Status Init() {
    for (const char* pragma : {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=NORMAL;",
                               "PRAGMA foreign_keys=ON;", "PRAGMA busy_timeout=5000;"}) {
      if (absl::Status s = Exec(pragma); !s.ok()) return s;
    }
    if (absl::Status s = Exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER "
                              "NOT NULL);");
        !s.ok()) {
      return s;
    }
    int64_t version = 0;
    {
      Statement st(db_, "SELECT version FROM schema_version LIMIT 1;");
      if (!st.ok()) return Error("read schema_version");
      if (st.Step() == SQLITE_ROW) {
        version = st.Int(0);
      } else {
        if (absl::Status s = Exec("INSERT INTO schema_version (version) VALUES (0);"); !s.ok())
          return s;
      }
    }
    if (version > kStoreSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database schema version ", version, " is newer than this build's (",
          kStoreSchemaVersion, "); upgrade paratune-coordinator"));
    }
    for (int64_t v = version; v < kStoreSchemaVersion; ++v) {
      absl::Status s = InTransaction([&]() -> absl::Status {
        if (absl::Status m = Exec(kMigrations[v]); !m.ok()) return m;
        return Exec(absl::StrCat("UPDATE schema_version SET version = ", v + 1, ";").c_str());
      });
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status PutJob(const JobRecord& r) override {
    Statement st(db_,
                 "INSERT INTO jobs (id, state, job, modelled, results) VALUES (?1, ?2, ?3, ?4, "
                 "?5) ON CONFLICT(id) DO UPDATE SET state = ?2, job = ?3, modelled = ?4, "
                 "results = ?5;");
    if (!st.ok()) return Error("prepare PutJob");
    st.BindText(1, r.job.id());
    st.BindInt(2, r.job.state());
    st.BindBlob(3, Serialize(r.job));
    if (r.modelled) st.BindBlob(4, Serialize(*r.modelled)); else st.BindNull(4);
    if (r.results) st.BindBlob(5, Serialize(*r.results)); else st.BindNull(5);
    if (st.Step() != SQLITE_DONE) return Error("PutJob");
    return absl::OkStatus();
  }

  absl::Status UpdateJob(const v1::Job& job) override {
    Statement st(db_, "UPDATE jobs SET state = ?2, job = ?3 WHERE id = ?1;");
    if (!st.ok()) return Error("prepare UpdateJob");
    st.BindText(1, job.id());
    st.BindInt(2, job.state());
    st.BindBlob(3, Serialize(job));
    if (st.Step() != SQLITE_DONE) return Error("UpdateJob");
    if (sqlite3_changes(db_) == 0) {
      return absl::NotFoundError(absl::StrCat("job ", job.id(), " not found"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<JobRecord> GetJob(const std::string& id) override {
    Statement st(db_, "SELECT job, modelled, results FROM jobs WHERE id = ?1;");
    if (!st.ok()) return Error("prepare GetJob");
    st.BindText(1, id);
    const int rc = st.Step();
    if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
    if (rc != SQLITE_ROW) return Error("GetJob");
    return ReadJob(st);
  }

  absl::StatusOr<v1::Job> GetJobMessage(const std::string& id) override {
    Statement st(db_, "SELECT job FROM jobs WHERE id = ?1;");
    if (!st.ok()) return Error("prepare GetJobMessage");
    st.BindText(1, id);
    const int rc = st.Step();
    if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
    if (rc != SQLITE_ROW) return Error("GetJobMessage");
    v1::Job job;
    if (!job.ParseFromString(st.Blob(0))) return Corrupt("jobs.job");
    return job;
  }

  absl::StatusOr<std::vector<JobRecord>> ListJobs() override {
    Statement st(db_, "SELECT job, modelled, results FROM jobs ORDER BY rowid;");
    if (!st.ok()) return Error("prepare ListJobs");
    std::vector<JobRecord> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      absl::StatusOr<JobRecord> r = ReadJob(st);
      if (!r.ok()) return r.status();
      out.push_back(*std::move(r));
    }
    if (rc != SQLITE_DONE) return Error("ListJobs");
    return out;
  }

  absl::StatusOr<std::vector<JobRecord>> ListJobsForRecovery() override {
    const std::string terminal =
        absl::StrCat("(", static_cast<int>(v1::JOB_STATE_SUCCEEDED), ", ",
                     static_cast<int>(v1::JOB_STATE_FAILED), ", ",
                     static_cast<int>(v1::JOB_STATE_CANCELLED), ")");
    const std::string sql = absl::StrCat(
        "SELECT job, CASE WHEN state IN ", terminal, " THEN NULL ELSE modelled END, ",
        "CASE WHEN state IN ", terminal, " THEN NULL ELSE results END, ",
        "results IS NOT NULL FROM jobs ORDER BY rowid;");
    Statement st(db_, sql.c_str());
    if (!st.ok()) return Error("prepare ListJobsForRecovery");
    std::vector<JobRecord> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      absl::StatusOr<JobRecord> r = ReadJob(st);
      if (!r.ok()) return r.status();
      r->has_results = st.Int(3) != 0;
      out.push_back(*std::move(r));
    }
    if (rc != SQLITE_DONE) return Error("ListJobsForRecovery");
    return out;
  }

  absl::StatusOr<std::optional<std::string>> GetResultsBlob(const std::string& id) override {
    Statement st(db_, "SELECT results FROM jobs WHERE id = ?1;");
    if (!st.ok()) return Error("prepare GetResultsBlob");
    st.BindText(1, id);
    const int rc = st.Step();
    if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
    if (rc != SQLITE_ROW) return Error("GetResultsBlob");
    if (st.IsNull(0)) return std::optional<std::string>();
    return std::optional<std::string>(st.Blob(0));
  }

  absl::Status PutTasks(const std::vector<TaskRecord>& tasks) override {
    return InTransaction([&]() -> absl::Status {
      for (const TaskRecord& t : tasks) {
        if (absl::Status s = PutTask(t); !s.ok()) return s;
      }
      return absl::OkStatus();
    });
  }

  absl::StatusOr<std::vector<TaskRecord>> ListTasks(const std::string& job_id) override {
    Statement st(db_,
                 "SELECT task, state, result FROM tasks WHERE job_id = ?1 ORDER BY rowid;");
    if (!st.ok()) return Error("prepare ListTasks");
    st.BindText(1, job_id);
    std::vector<TaskRecord> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      TaskRecord t;
      if (!t.task.ParseFromString(st.Blob(0))) return Corrupt("tasks.task");
      t.state = static_cast<TaskState>(st.Int(1));
      if (!st.IsNull(2)) {
        t.result.emplace();
        if (!t.result->ParseFromString(st.Blob(2))) return Corrupt("tasks.result");
      }
      out.push_back(std::move(t));
    }
    if (rc != SQLITE_DONE) return Error("ListTasks");
    return out;
  }

  absl::Status PutTaskAndCache(const TaskRecord& task, bool cache) override {
    return InTransaction([&]() -> absl::Status {
      if (absl::Status s = PutTask(task); !s.ok()) return s;
      if (!cache || !task.result) return absl::OkStatus();
      Statement st(db_,
                   "INSERT OR REPLACE INTO profile_cache (device_kind, key, result) VALUES "
                   "(?1, ?2, ?3);");
      if (!st.ok()) return Error("prepare cache insert");
      st.BindText(1, task.task.device_kind());
      st.BindText(2, task.task.key());
      st.BindBlob(3, Serialize(*task.result));
      if (st.Step() != SQLITE_DONE) return Error("cache insert");
      return absl::OkStatus();
    });
  }

  absl::StatusOr<std::optional<v1::TaskResult>> GetCached(const std::string& device_kind,
                                                          const std::string& key) override {
    Statement st(db_, "SELECT result FROM profile_cache WHERE device_kind = ?1 AND key = ?2;");
    if (!st.ok()) return Error("prepare GetCached");
    st.BindText(1, device_kind);
    st.BindText(2, key);
    const int rc = st.Step();
    if (rc == SQLITE_DONE) return std::optional<v1::TaskResult>();
    if (rc != SQLITE_ROW) return Error("GetCached");
    v1::TaskResult r;
    if (!r.ParseFromString(st.Blob(0))) return Corrupt("profile_cache.result");
    return std::optional<v1::TaskResult>(std::move(r));
  }

  absl::StatusOr<int64_t> CacheSize() override {
    Statement st(db_, "SELECT COUNT(*) FROM profile_cache;");
    if (!st.ok() || st.Step() != SQLITE_ROW) return Error("CacheSize");
    return st.Int(0);
  }

 private:
  absl::Status PutTask(const TaskRecord& t) {
    Statement st(db_,
                 "INSERT INTO tasks (id, job_id, state, task, result) VALUES (?1, ?2, ?3, ?4, "
                 "?5) ON CONFLICT(id) DO UPDATE SET state = ?3, task = ?4, result = ?5;");
    if (!st.ok()) return Error("prepare PutTask");
    st.BindText(1, t.task.id());
    st.BindText(2, t.task.job_id());
    st.BindInt(3, static_cast<int64_t>(t.state));
    st.BindBlob(4, Serialize(t.task));
    if (t.result) st.BindBlob(5, Serialize(*t.result)); else st.BindNull(5);
    if (st.Step() != SQLITE_DONE) return Error("PutTask");
    return absl::OkStatus();
  }

  absl::StatusOr<JobRecord> ReadJob(Statement& st) {
    JobRecord r;
    if (!r.job.ParseFromString(st.Blob(0))) return Corrupt("jobs.job");
    if (!st.IsNull(1)) {
      r.modelled.emplace();
      if (!r.modelled->ParseFromString(st.Blob(1))) return Corrupt("jobs.modelled");
    }
    if (!st.IsNull(2)) {
      r.results.emplace();
      if (!r.results->ParseFromString(st.Blob(2))) return Corrupt("jobs.results");
      r.has_results = true;
    }
    return r;
  }

  template <typename F>
  absl::Status InTransaction(F&& body) {
    if (absl::Status s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
    absl::Status s = body();
    if (!s.ok()) {
      Exec("ROLLBACK;").IgnoreError();
      return s;
    }
    return Exec("COMMIT;");
  }

  absl::Status Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      absl::Status s = absl::InternalError(absl::StrCat("sqlite: ", err ? err : "error"));
      sqlite3_free(err);
      return s;
    }
    return absl::OkStatus();
  }
  absl::Status Error(const char* what) {
    return absl::InternalError(absl::StrCat("sqlite ", what, ": ", sqlite3_errmsg(db_)));
  }
  static absl::Status Corrupt(const char* column) {
    return absl::DataLossError(absl::StrCat("store: cannot parse ", column));
  }

  sqlite3* db_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path) {
  // A new database file is created 0600 (it holds job specs and results; SQLite gives its
  // -wal and -shm files the same mode). An existing file keeps the mode it has.
  if (!path.empty() && path != ":memory:" && path.rfind("file:", 0) != 0) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
  }
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open database ", path, ": ", msg));
  }
  // SQLite falls back to read-only when the file cannot be written (permissions, a
  // read-only mount, chattr +i); every later write would fail, so refuse at startup.
  if (sqlite3_db_readonly(db, "main") == 1) {
    sqlite3_close(db);
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", path, " is read-only (sqlite could not open it for writing)"));
  }
  auto store = std::make_unique<SqliteStore>(db);
  if (absl::Status s = store->Init(); !s.ok()) return s;
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace paratune::server
